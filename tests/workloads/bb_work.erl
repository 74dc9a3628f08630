%% Workloads for beam-bpf's integration tests. Each runs as
%%   erl -noshell -pa DIR -eval 'bb_work:main(Name)'      (or bb_work:main(Name, Arg))
%% prints one `ready ...` line on stdout once its shape is in place (with the pids of the
%% worker processes), then reads commands from stdin: `quit` (or end of input) halts the VM.
%%
%% The shapes are chosen so the expected profile is known by construction; keep them that way
%% (check with `erlc -S bb_work.erl` after any change: the chains must stay non-tail calls and
%% the leaf loops must stay separate, allocation-free functions).
-module(bb_work).
-export([main/1, main/2, serve/1]).  % serve/1: for the other workload modules
%% Entry points of spawned processes: exported so spawn/3 starts them with no wrapper frame.
-export([root/0, deep_root/3, caller_a/1, caller_b/1, alloc_loop/0, arith_loop/0, big_gc_loop/1, sorter/0,
         busy_queue/0, busy_queue_sender/3, dirty_hog/0,
         named_root/3, procs_hold/2, short_spawner/1, short_task/2]).
%% deep_server's gen_server callbacks.
-export([init/1, handle_call/3, handle_cast/2]).

%% The endless loops (deep_leaf, spin_a, spin_b) stop when their counter equals `Never`, a
%% value it never takes (-1) that the compiler cannot see, because it comes from spawn's
%% arguments. With a literal instead, the compiler proves the loop never returns and turns the
%% caller's body call into a tail call, which removes the frames the tests look for.
-define(NEVER, -1).

%% split532 calibration: a round (f5 + f3 + f2) takes 10 units of UNIT_NS; each fN is timed
%% CAL_RUNS times over CAL_ITERS iterations.
-define(UNIT_NS, 1000000).
-define(CAL_ITERS, 200000).
-define(CAL_RUNS, 101).

main(Name) -> main(Name, undefined).

main(Name, Arg) -> serve(start(Name, Arg)).

%% The protocol, for other workload modules too: `ready` and Info, then commands until quit.
serve(Info) ->
    io:format("ready~s~n", [[[$\s | fmt(P)] || P <- Info]]),
    command_loop([P || P <- Info, is_pid(P)], undefined).

fmt(Pid) when is_pid(Pid) -> pid_to_list(Pid);
fmt(Term) -> io_lib:format("~p", [Term]).

%% `runtime_start` and `runtime_stop`: the time each worker process spent on a scheduler in
%% between, from the VM's own trace of it being scheduled in and out (an oracle for shares of
%% CPU per process); printed as `runtime <pid> <microseconds> ...` in the order of `ready`.
command_loop(Pids, Tracer) ->
    case io:get_line('') of
        "quit" ++ _ -> erlang:halt(0);
        eof -> erlang:halt(0);         % the test that owned our stdin is gone
        {error, _} -> erlang:halt(0);
        "runtime_start" ++ _ ->
            Self = self(),
            T = spawn(fun() -> runtime_tracer(Pids, Self) end),
            receive {T, tracing} -> ok end,
            command_loop(Pids, T);
        "info" ++ _ ->
            print_info(Pids),
            command_loop(Pids, Tracer);
        "go" ++ _ ->                   % for workers that wait to start (bb_native's late_crypto)
            [P ! go || P <- Pids],
            command_loop(Pids, Tracer);
        "runtime_stop" ++ _ when is_pid(Tracer) ->
            Tracer ! {stop, self()},
            receive {Tracer, Us} ->
                    io:format("runtime~s~n", [[io_lib:format(" ~s ~p", [pid_to_list(P), maps:get(P, Us, 0)])
                                               || P <- Pids]])
            end,
            command_loop(Pids, undefined);
        _ -> command_loop(Pids, Tracer)
    end.

%% `info`: what process_info/2 says of each worker, one `pinfo` line each, then `pinfo_end` with
%% the VM's process count: the oracle for beam-bpf-procs.
print_info(Pids) ->
    Keys = [registered_name, status, message_queue_len, heap_size, total_heap_size, stack_size,
            reductions, memory, current_function],
    [begin
         Info = erlang:process_info(P, Keys),
         {current_function, {M, F, A}} = lists:keyfind(current_function, 1, Info),
         Reg = case lists:keyfind(registered_name, 1, Info) of
                   {registered_name, []} -> "-";
                   {registered_name, R} -> atom_to_list(R)
               end,
         io:format("pinfo ~s reg=~s status=~p msgq=~p heap=~p total_heap=~p stack=~p reds=~p memory=~p "
                   "current=~s:~s/~p~n",
                   [pid_to_list(P), Reg | [element(2, lists:keyfind(K, 1, Info))
                                           || K <- [status, message_queue_len, heap_size, total_heap_size,
                                                    stack_size, reductions, memory]]] ++ [M, F, A])
     end || P <- Pids],
    io:format("pinfo_end ~p~n", [erlang:system_info(process_count)]).

runtime_tracer(Pids, From) ->
    [erlang:trace(P, true, [running, monotonic_timestamp]) || P <- Pids],
    From ! {self(), tracing},
    runtime_collect(#{}, #{}).

runtime_collect(In, Sum) ->
    receive
        {trace_ts, P, in, _, T} ->
            runtime_collect(In#{P => T}, Sum);
        {trace_ts, P, out, _, T} when is_map_key(P, In) ->
            runtime_collect(maps:remove(P, In), Sum#{P => maps:get(P, Sum, 0) + T - maps:get(P, In)});
        {stop, From} ->
            Now = erlang:monotonic_time(),
            All = maps:fold(fun(P, T0, S) -> S#{P => maps:get(P, S, 0) + Now - T0} end, Sum, In),
            From ! {self(), maps:map(fun(_, T) -> erlang:convert_time_unit(T, native, microsecond) end, All)};
        _ ->
            runtime_collect(In, Sum)
    end.

%% --- split532 ---------------------------------------------------------------------------
%% One process loops root() -> chain1() -> chain2() -> f5, f3, f2, so every sample in a leaf
%% has the Erlang stack root;chain1;chain2;fN. chain1/chain2 use the callee's result
%% afterwards, so their calls are real (non-tail) calls that leave a frame on the stack. The
%% leaves run the same loop body, allocate nothing and call no BIF (no GC or C code to skew
%% the split), and their iteration counts give them 5, 3 and 2 units of CPU time per round.
%% The counts are calibrated at start and then steered every round (chain2/steer): identical
%% JIT loops run at different speeds (up to 15% apart on this machine) depending on where
%% their code lands, and that can change while the VM runs, so equal or fixed iteration
%% counts would not give a 5:3:2 split of time.
start(split532, _) ->
    Parent = self(),
    Pid = spawn(fun() ->
                        Counts = calibrate(),
                        put(bb_split_counts, Counts),
                        Parent ! {self(), Counts},
                        root()   % tail call: root/0 is the bottom frame
                end),
    receive {Pid, {N5, N3, N2}} ->
            io:format("split532 iterations f5=~p f3=~p f2=~p~n", [N5, N3, N2])
    end,
    [Pid];

%% --- deep -------------------------------------------------------------------------------
%% One process body-recurses N levels (deep_rec/2, non-tail), then spins forever in
%% deep_leaf/2: every sample shows deep_root/3, exactly N deep_rec/3 frames, deep_leaf/2.
%% N = 100000 is deeper than any --max-depth, for the truncation tests.
start(deep, N) when is_integer(N), N >= 0 ->
    Pid = spawn(?MODULE, deep_root, [N, self(), ?NEVER]),
    receive {Pid, at_bottom} -> [Pid] end;

%% --- deep_server ------------------------------------------------------------------------
%% A gen_server whose handle_call/3 body-recurses N levels (deep_rec/3) and then spins in
%% deep_leaf/2, never replying: every sample of it shows proc_lib and gen_server frames,
%% handle_call/3, N deep_rec/3 frames and deep_leaf/2. Prints `ready <server pid>`.
start(deep_server, N) when is_integer(N), N >= 0 ->
    {ok, Pid} = gen_server:start(?MODULE, ?NEVER, []),
    Parent = self(),
    spawn(fun() -> gen_server:call(Pid, {deep, N, Parent}, infinity) end),
    receive {Pid, at_bottom} -> [Pid] end;

%% --- busy2 ------------------------------------------------------------------------------
%% Two processes spin forever in different functions under different callers
%% (caller_a/1 -> spin_a/2, caller_b/1 -> spin_b/2): with +S 2 both normal schedulers are
%% busy, each with one known process, for --pstack. Prints `ready <a pid> <b pid>`.
start(busy2, _) ->
    [spawn(?MODULE, caller_a, [?NEVER]), spawn(?MODULE, caller_b, [?NEVER])];

%% --- alloc_arith ------------------------------------------------------------------------
%% One process builds and drops lists (many minor GCs: time in erts_garbage_collect), the
%% other does allocation-free arithmetic (no GC at all): for beam-bpf-blame. Prints
%% `ready <alloc pid> <arith pid>`.
start(alloc_arith, _) ->
    [spawn(?MODULE, alloc_loop, []), spawn(?MODULE, arith_loop, [])];

%% --- dirty_gc ---------------------------------------------------------------------------
%% busy2's two spinners keep both normal schedulers (+S 2) busy, and a third process holds a
%% large live heap (a list of 1M tuples, well over the size whose major collections the VM
%% hands to a dirty CPU scheduler) and collects it in a loop: every collection runs on a dirty
%% CPU scheduler, which then goes back to sleep while the process is running again on a normal
%% one. A fourth process sorts random lists, so its heap keeps growing past the dirty GC size
%% and it keeps moving between normal and dirty schedulers. Prints
%% `ready <a pid> <b pid> <gc pid> <sorter pid>`.
start(dirty_gc, _) ->
    Busy = start(busy2, undefined),
    Busy ++ [spawn(?MODULE, big_gc_loop, [[{I, I} || I <- lists:seq(1, 1000000)]]),
             spawn(?MODULE, sorter, [])];

%% --- named ------------------------------------------------------------------------------
%% Processes that run the same code (named_root/3 -> named_loop/3 -> named_spin/3) under
%% different names, for --by-process: bb_alpha (registered) never pauses, bb_beta
%% (registered) spins 5 ms then sleeps 10, a process labelled {bb_gamma,3} (as
%% proc_lib:set_label/1 does it, in the dictionary) and one started by proc_lib (so its
%% initial call is proc_lib's, and its dictionary names bb_work:named_root/3) spin 2 ms
%% then sleep 10. `runtime_start`/`runtime_stop` measure their shares independently.
%% Prints `ready <alpha> <beta> <gamma> <delta>`.
start(named, _) ->
    [spawn(?MODULE, named_root, [{register, bb_alpha}, 0, ?NEVER]),
     spawn(?MODULE, named_root, [{register, bb_beta}, 5, ?NEVER]),
     spawn(?MODULE, named_root, [{label, {bb_gamma, 3}}, 2, ?NEVER]),
     proc_lib:spawn(?MODULE, named_root, [none, 2, ?NEVER])];

%% --- short_tasks ------------------------------------------------------------------------
%% Processes that live about a millisecond, as a server's per-request workers do: bb_spawner
%% (registered) starts four at a time with proc_lib (initial call proc_lib:init_p/5, the real
%% one in '$initial_call'), each with '$callers' as Elixir's Task sets it, and waits for them.
%% Each is gone long before the profiler reads its samples. Prints `ready <spawner>`.
start(short_tasks, _) ->
    S = spawn(?MODULE, short_spawner, [?NEVER]),
    wait_registered([bb_spawner]),
    [S];

%% --- procs ------------------------------------------------------------------------------
%% Processes with known contents, for beam-bpf-procs, all waiting in a receive that never
%% matches: bb_queue with 10,000 messages queued, bb_big_heap holding a list of 65,536 integers
%% (over 1 MiB of heap), bb_refc holding a 4 MiB binary (off the heap), and one registered
%% under an Elixir module's name. `info` prints what process_info/2 says of them. Prints
%% `ready <queue> <big heap> <refc> <elixir>`.
start(procs, _) ->
    Q = spawn(?MODULE, procs_hold, [bb_queue, none]),
    [Q ! {msg, I} || I <- lists:seq(1, 10000)],
    Procs = [Q, spawn(?MODULE, procs_hold, [bb_big_heap, lists:seq(1, 65536)]),
             spawn(?MODULE, procs_hold, [bb_refc, binary:copy(<<1>>, 4 * 1024 * 1024)]),
             spawn(?MODULE, procs_hold, ['Elixir.BbProcs.Worker', {state, 1}])],
    wait_registered([bb_queue, bb_big_heap, bb_refc, 'Elixir.BbProcs.Worker']),
    Procs;

%% --- busy_queue -------------------------------------------------------------------------
%% A process that waits, not running, with its heap abandoned (run with +SDcpu 1:1).
%% bb_busy_queue keeps a list of 2,000 messages (off the heap until received) and, for each one
%% it receives from four senders, builds 2,000 tuples in Erlang code. Its young heap
%% (min_heap_size 300,000 words) is over the size whose collections the VM hands to a dirty CPU
%% scheduler, so the heap test that finds it full (a collection that needs words) cannot collect
%% there and then: the VM abandons the heap for a new one in a heap fragment, with the stack
%% copied there, and queues the process for the dirty scheduler (delay_garbage_collection(),
%% erl_gc.c). dirty_hog holds that scheduler 100 ms at a time, so the process mostly waits
%% there, its stack and new heap pointing into the abandoned heap. Prints
%% `ready <bb_busy_queue pid>`.
start(busy_queue, _) ->
    Q = spawn_opt(?MODULE, busy_queue, [], [{min_heap_size, 300000}, {message_queue_data, off_heap}]),
    [spawn(?MODULE, busy_queue_sender, [Q, K, 0]) || K <- lists:seq(1, 4)],
    spawn(?MODULE, dirty_hog, []),
    wait_registered([bb_busy_queue]),
    [Q];

%% --- idle -------------------------------------------------------------------------------
%% Nothing runs: a VM to attach to (errors, privileges) without load.
start(idle, _) ->
    [].

%% busy_queue -------------------------------------------------------------------------------
busy_queue() ->
    register(bb_busy_queue, self()),
    busy_queue_loop(busy_queue_build(2000, []), 0).

%% The state is a Y register across the call to busy_queue_work/2.
busy_queue_loop(State, N) ->
    receive
        {msg, _From, Payload} ->
            State1 = busy_queue_work(State, Payload),
            busy_queue_next(State1, N + 1)
    end.

busy_queue_next(State, N) -> busy_queue_loop(State, N).

%% Allocation by Erlang code (a BIF such as ++ would take a heap fragment instead).
busy_queue_work(State, Payload) ->
    Garbage = busy_queue_build(2000, []),
    [Payload | busy_queue_take(1999, State, length(Garbage))].

busy_queue_build(0, Acc) -> Acc;
busy_queue_build(N, Acc) -> busy_queue_build(N - 1, [{N, N} | Acc]).

busy_queue_take(0, _, _) -> [];
busy_queue_take(N, [H | T], G) -> [H | busy_queue_take(N - 1, T, G)].

%% About 10 messages a millisecond each: bb_busy_queue is idle part of the time (else it is
%% nearly always running, and --inspect busy), and fills its heap every few milliseconds. Never
%% over 2,000 queued (process_info/2 only now and then: it takes the queue's locks).
busy_queue_sender(Q, K, N) when N rem 10 =:= 0 ->
    timer:sleep(1),
    case N rem 100 =:= 0 andalso erlang:process_info(Q, message_queue_len) of
        {message_queue_len, L} when L > 2000 -> busy_queue_sender(Q, K, N);
        _ -> busy_queue_send(Q, K, N)
    end;
busy_queue_sender(Q, K, N) -> busy_queue_send(Q, K, N).

%% Holds the dirty CPU scheduler 100 ms at a time (erts_debug:dirty_cpu/2, the VM's own test
%% BIF for dirty schedulers, in every build).
dirty_hog() ->
    erts_debug:dirty_cpu(wait, 100),
    dirty_hog().

busy_queue_send(Q, K, N) ->
    Q ! {msg, self(), {K, N, lists:seq(1, 20), list_to_binary(lists:duplicate(40, K))}},
    busy_queue_sender(Q, K, N + 1).

%% procs ------------------------------------------------------------------------------------
procs_hold(Name, Term) ->
    register(Name, self()),
    receive {stop, From} -> From ! Term end.

wait_registered(Names) ->
    case [N || N <- Names, whereis(N) =:= undefined] of
        [] -> timer:sleep(100);  % and let each reach its receive
        _ -> timer:sleep(10), wait_registered(Names)
    end.

%% named ------------------------------------------------------------------------------------
named_root(How, SpinMs, Never) ->
    case How of
        {register, Name} -> register(Name, self());
        {label, Label} -> put('$process_label', Label);
        none -> ok
    end,
    R = named_loop(SpinMs, Never, erlang:monotonic_time(millisecond)),
    exit({returned, R}).

%% SpinMs = 0: spin without pause; else spin SpinMs, sleep 10 ms, again.
named_loop(SpinMs, Never, Start) ->
    _ = named_spin(200000, 0, Never),
    Now = erlang:monotonic_time(millisecond),
    if
        SpinMs > 0, Now - Start >= SpinMs ->
            receive after 10 -> ok end,
            named_loop(SpinMs, Never, erlang:monotonic_time(millisecond));
        true ->
            named_loop(SpinMs, Never, Start)
    end.

named_spin(0, Acc, _Never) -> Acc;
named_spin(N, Acc, Never) when N =:= Never -> Acc;
named_spin(N, Acc, Never) -> named_spin(N - 1, (Acc + 7) band 16#ffffff, Never).

%% short_tasks ------------------------------------------------------------------------------
short_spawner(Never) ->
    register(bb_spawner, self()),
    short_spawn_loop(Never).

short_spawn_loop(Never) ->
    Tasks = [proc_lib:spawn(?MODULE, short_task, [self(), Never]) || _ <- lists:seq(1, 4)],
    Refs = [monitor(process, T) || T <- Tasks],
    [receive {'DOWN', R, process, _, _} -> ok end || R <- Refs],
    short_spawn_loop(Never).

short_task(Caller, Never) ->
    put('$callers', [Caller]),
    named_spin(100000, 0, Never).

%% dirty_gc ---------------------------------------------------------------------------------
big_gc_loop(Live) ->
    erlang:garbage_collect(),
    big_gc_loop(Live).

sorter() ->
    L = [rand:uniform(1000000) || _ <- lists:seq(1, 20000)],
    _ = lists:sort(L),
    sorter().

%% split532 ---------------------------------------------------------------------------------
root() ->
    _ = chain1(),
    root().

chain1() ->
    R = chain2(),
    R band 16#ffff.

%% Each leaf's call is timed here (outside the leaves, so their samples and stacks are
%% untouched) and the next round's counts steer the recent time shares back to 5:3:2: a
%% one-off calibration was seen to be off by 5 points when the machine's speed for one loop
%% changed after start-up.
chain2() ->
    {N5, N3, N2} = get(bb_split_counts),
    T0 = erlang:monotonic_time(nanosecond),
    A = f5(N5, 0),
    T1 = erlang:monotonic_time(nanosecond),
    B = f3(N3, 0),
    T2 = erlang:monotonic_time(nanosecond),
    C = f2(N2, 0),
    T3 = erlang:monotonic_time(nanosecond),
    steer({N5, N3, N2}, {T1 - T0, T2 - T1, T3 - T2}),
    A bxor B bxor C.

%% Recent time per leaf (decaying over ~100 rounds, about a second) and each leaf's speed
%% (ns per iteration) give the counts that bring each leaf's recent time to its share.
steer({N5, N3, N2}, {D5, D3, D2}) ->
    {S5, S3, S2} = case get(bb_split_spent) of undefined -> {0, 0, 0}; S -> S end,
    Spent = {0.99 * S5 + D5, 0.99 * S3 + D3, 0.99 * S2 + D2},
    put(bb_split_spent, Spent),
    Total = element(1, Spent) + element(2, Spent) + element(3, Spent),
    Round = 10 * ?UNIT_NS,
    Next = fun(Units, SpentI, D, N) ->
                   Want = (Total + Round) * Units / 10 - SpentI,
                   Share = Units * ?UNIT_NS,
                   Clamped = max(0.25 * Share, min(4 * Share, Want)),
                   max(1000, round(Clamped * N / max(D, 1)))
           end,
    put(bb_split_counts, {Next(5, element(1, Spent), D5, N5),
                          Next(3, element(2, Spent), D3, N3),
                          Next(2, element(3, Spent), D2, N2)}).

%% Identical bodies on purpose; the compiler neither merges nor inlines them (no inline
%% option here), `erlc -S` shows three separate functions.
f5(0, Acc) -> Acc;
f5(N, Acc) -> f5(N - 1, Acc bxor N).

f3(0, Acc) -> Acc;
f3(N, Acc) -> f3(N - 1, Acc bxor N).

f2(0, Acc) -> Acc;
f2(N, Acc) -> f2(N - 1, Acc bxor N).

%% Iteration counts for 5, 3 and 2 units, from the median time per iteration of each leaf
%% (runs interleaved, so a slow spell of the machine hits all three alike). The first round
%% only warms up the CPU (clock ramp-up would otherwise make the early runs slow).
calibrate() ->
    _ = [timed(f5) || _ <- lists:seq(1, 100)],
    Runs = [{timed(f5), timed(f3), timed(f2)} || _ <- lists:seq(1, ?CAL_RUNS)],
    {iters(5, median([T || {T, _, _} <- Runs])),
     iters(3, median([T || {_, T, _} <- Runs])),
     iters(2, median([T || {_, _, T} <- Runs]))}.

%% Leaves picked by atom, not passed as funs: with `timed(fun f5/2)`, `timed(fun f3/2)`...
%% OTP 25.2's compiler typed timed/1's argument as `fun f5/2` only and the run list came out
%% empty.
timed(Leaf) ->
    T0 = erlang:monotonic_time(nanosecond),
    _ = run_leaf(Leaf, ?CAL_ITERS),
    erlang:monotonic_time(nanosecond) - T0.

run_leaf(f5, N) -> f5(N, 0);
run_leaf(f3, N) -> f3(N, 0);
run_leaf(f2, N) -> f2(N, 0).

median(L) -> lists:nth(length(L) div 2 + 1, lists:sort(L)).

iters(Units, Ns) -> round(Units * ?UNIT_NS * ?CAL_ITERS / Ns).

%% deep ---------------------------------------------------------------------------------------
deep_root(N, Parent, Never) ->
    R = deep_rec(N, Parent, Never),
    exit({returned, R}).

deep_rec(0, Parent, Never) ->
    Parent ! {self(), at_bottom},
    deep_leaf(0, Never);
deep_rec(N, Parent, Never) ->
    R = deep_rec(N - 1, Parent, Never),
    R + 1.

deep_leaf(Never, Never) -> 0;
deep_leaf(Acc, Never) -> deep_leaf((Acc + 1) band 16#ffffff, Never).

%% deep_server: the state is `Never`, unknown to the compiler (see ?NEVER).
init(Never) -> {ok, Never}.

handle_call({deep, N, Parent}, _From, Never) ->
    R = deep_rec(N, Parent, Never),
    {reply, R, Never}.

handle_cast(_, Never) -> {noreply, Never}.

%% busy2 -------------------------------------------------------------------------------------
caller_a(Never) ->
    R = spin_a(0, Never),
    exit({returned, R}).

caller_b(Never) ->
    R = spin_b(0, Never),
    exit({returned, R}).

spin_a(Never, Never) -> 0;
spin_a(Acc, Never) -> spin_a((Acc + 3) band 16#ffffff, Never).

spin_b(Never, Never) -> 0;
spin_b(Acc, Never) -> spin_b((Acc + 5) band 16#ffffff, Never).

%% alloc_arith ---------------------------------------------------------------------------
alloc_loop() ->
    L = build(1000, []),
    _ = length(L),
    alloc_loop().

build(0, Acc) -> Acc;
build(N, Acc) -> build(N - 1, [N | Acc]).

arith_loop() ->
    _ = arith(1000000, 0),
    arith_loop().

%% Only operators the JIT emits inline for small integers (`*` and `div` would call shared
%% helper code), so samples land in arith/2 itself.
arith(0, Acc) -> Acc;
arith(N, Acc) -> arith(N - 1, ((Acc bxor N) + (Acc bsr 3)) band 16#ffffff).
