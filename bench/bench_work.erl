%% Workloads for scripts/bench.sh. Each runs as
%%   erl -noshell -pa DIR -eval 'bench_work:main(Name, Arg)'
%% prints one `ready ...` line on stdout once it is in place, then reads commands from stdin:
%%   go    (overhead only) run the timed work once and print `done NS`
%%   warm  (overhead only) run a tenth of it (a warm-up) and print `warm NS`
%%   quit  (or end of input) halts the VM.
%%
%% overhead, Iters
%%     A fixed amount of CPU-bound work, split evenly over one process per scheduler, timed
%%     inside the VM with erlang:monotonic_time/1 from just before the processes are spawned
%%     to the last one's reply. The work is a mix of integer arithmetic, list building and
%%     traversal, small maps, funs and non-tail function calls, so it allocates (minor GCs) and
%%     has a stack a few frames deep, like ordinary Erlang code.
%% pingpong, Rounds
%%     A fixed amount of message passing that makes the schedulers block and wake all the time
%%     (-e offcpu's worst case): on `go`, 50 pairs of processes each exchange Rounds messages,
%%     sleeping 2 ms after every 1,000; `done NS` when all are done. `warm` does a tenth.
%% spin, _
%%     The same work, endlessly, on one process per scheduler: a VM busy on every CPU.
%% modules, {Dir, G}
%%     Loads the G modules bm_1 .. bm_G from Dir (made by gen_modules/2), then keeps one process
%%     per scheduler walking chains of calls through them: bm_S:step/2 calls the next module's
%%     step/2 (a real, non-tail call) Depth times, then spins in the last module's leaf. S cycles
%%     over all G modules, so the samples' stacks reference all of them.
%%     Prints `ready MODULES` with the number of modules the VM has loaded in all.
%%
%% procs, N
%%     N processes waiting in a receive, each holding a list of 0 to 49 integers, plus a churner
%%     that keeps spawning and ending short-lived processes (about 2,000 a second), so a reader of
%%     the process table meets processes dying under it. Prints `ready PROCESS_COUNT`. Command:
%%     `info` walks every process with process_info/2 (memory, message_queue_len, reductions:
%%     what beam-bpf-procs reads) inside the VM and prints `info MS COUNT`, the in-VM way of
%%     getting the same table, for comparison. `memory FILE` writes `PID BYTES` lines, each
%%     process's process_info(P, memory), to FILE, then prints `memory COUNT`.
%%
%% idle, N
%%     N processes waiting in a receive (as procs' holders), nothing else: the table a wall
%%     profile (-e wall) samples from. Prints `ready PROCESS_COUNT`.
%%
%% gen_modules(Dir, G) compiles the G small modules into Dir (run once, in its own VM, so the
%% profiled VM does not also load the compiler).
-module(bench_work).
-export([main/2, gen_modules/2]).
-export([worker/3, walker/4, holder/1, churn/0]).

-define(DEPTH, 8).          % module-to-module calls per chain
-define(LEAF_SPIN, 400).    % iterations of the leaf loop per chain

main(overhead, Iters) when is_integer(Iters), Iters > 0 ->
    io:format("ready ~p~n", [erlang:system_info(schedulers_online)]),
    overhead_loop(fun run_timed/1, Iters);
main(pingpong, Rounds) when is_integer(Rounds), Rounds > 0 ->
    io:format("ready ~p~n", [erlang:system_info(schedulers_online)]),
    overhead_loop(fun(R) -> pingpong(R) end, Rounds);
main(spin, _) ->
    N = erlang:system_info(schedulers_online),
    [spawn(?MODULE, worker, [endless, 1, self()]) || _ <- lists:seq(1, N)],
    io:format("ready ~p~n", [N]),
    command_loop();
main(modules, {Dir, G}) when is_integer(G), G > 0 ->
    true = code:add_patha(Dir),
    Mods = [mod(I) || I <- lists:seq(1, G)],
    [{module, M} = code:ensure_loaded(M) || M <- Mods],
    N = erlang:system_info(schedulers_online),
    [spawn(?MODULE, walker, [G, I, N, ?DEPTH]) || I <- lists:seq(1, N)],
    io:format("ready ~p~n", [length(code:all_loaded())]),
    command_loop();
main(idle, N) when is_integer(N), N > 0 ->
    [spawn(?MODULE, holder, [lists:seq(1, I rem 50)]) || I <- lists:seq(1, N)],
    io:format("ready ~p~n", [erlang:system_info(process_count)]),
    command_loop();
main(procs, N) when is_integer(N), N > 0 ->
    [spawn(?MODULE, holder, [lists:seq(1, I rem 50)]) || I <- lists:seq(1, N)],
    spawn(?MODULE, churn, []),
    io:format("ready ~p~n", [erlang:system_info(process_count)]),
    command_loop().

holder(Term) -> receive {stop, From} -> From ! Term end.

churn() ->
    [spawn(fun() -> receive after I rem 7 -> ok end end) || I <- lists:seq(1, 20)],
    timer:sleep(10),
    churn().

command_loop() ->
    case io:get_line('') of
        "info" ++ _ ->
            T0 = erlang:monotonic_time(),
            Infos = [erlang:process_info(P, [memory, message_queue_len, reductions]) || P <- processes()],
            Ms = erlang:convert_time_unit(erlang:monotonic_time() - T0, native, microsecond) / 1000,
            io:format("info ~.1f ~p~n", [Ms, length([I || I <- Infos, I =/= undefined])]),
            command_loop();
        "memory " ++ File ->
            Lines = [[pid_to_list(P), $\s, integer_to_list(M), $\n]
                     || P <- processes(), {memory, M} <- [erlang:process_info(P, memory)]],
            ok = file:write_file(string:trim(File), Lines),
            io:format("memory ~p~n", [length(Lines)]),
            command_loop();
        "quit" ++ _ -> erlang:halt(0);
        eof -> erlang:halt(0);
        {error, _} -> erlang:halt(0);
        _ -> command_loop()
    end.

overhead_loop(Run, Iters) ->
    case io:get_line('') of
        "go" ++ _ ->
            io:format("done ~p~n", [Run(Iters)]),
            overhead_loop(Run, Iters);
        "warm" ++ _ ->
            io:format("warm ~p~n", [Run(max(1, Iters div 10))]),
            overhead_loop(Run, Iters);
        "quit" ++ _ -> erlang:halt(0);
        eof -> erlang:halt(0);
        {error, _} -> erlang:halt(0);
        _ -> overhead_loop(Run, Iters)
    end.

%% Wall-clock nanoseconds for 50 pairs to exchange Rounds messages each.
pingpong(Rounds) ->
    Self = self(),
    T0 = erlang:monotonic_time(nanosecond),
    Pids = [spawn(fun() -> pinger(Self, Rounds) end) || _ <- lists:seq(1, 50)],
    [receive {P, done} -> ok end || P <- Pids],
    erlang:monotonic_time(nanosecond) - T0.

pinger(Parent, Rounds) ->
    Peer = spawn(fun Pong() -> receive {ping, F} -> F ! pong, Pong(); stop -> ok end end),
    ping(Peer, Rounds),
    Peer ! stop,
    Parent ! {self(), done}.

ping(_Peer, 0) -> ok;
ping(Peer, N) ->
    Peer ! {ping, self()},
    receive pong -> ok end,
    case N rem 1000 of 0 -> timer:sleep(2); _ -> ok end,
    ping(Peer, N - 1).

%% Wall-clock nanoseconds for Iters units of work on one process per online scheduler.
run_timed(Iters) ->
    N = erlang:system_info(schedulers_online),
    Self = self(),
    T0 = erlang:monotonic_time(nanosecond),
    Pids = [spawn(?MODULE, worker, [Iters div N, I, Self]) || I <- lists:seq(1, N)],
    [receive {P, _Result} -> ok end || P <- Pids],
    erlang:monotonic_time(nanosecond) - T0.

worker(endless, Seed, Parent) ->
    _ = work(100000, Seed, 0),
    worker(endless, Seed + 1, Parent);
worker(Iters, Seed, Parent) ->
    R = work(Iters, Seed, 0),
    Parent ! {self(), R}.

work(0, _Seed, Acc) -> Acc;
work(N, Seed, Acc) ->
    R = unit(N + Seed),
    work(N - 1, Seed, (Acc + R) band 16#ffffff).

%% One unit of mixed work (about 1 us here).
unit(I) ->
    L = lists:seq(1, 16),
    Sq = lists:map(fun(X) -> X * X + I end, L),
    M = lists:foldl(fun(X, Acc) -> maps:put(X band 7, X + I, Acc) end, #{}, Sq),
    S = lists:sum(Sq) + maps:get(I band 7, M, 0),
    T = tree_sum(tree(4, I)),
    (S + T + fib(8)) band 16#ffff.

tree(0, I) -> {leaf, I band 255};
tree(D, I) -> {node, tree(D - 1, I + 1), tree(D - 1, I * 3)}.

tree_sum({leaf, V}) -> V;
tree_sum({node, L, R}) -> tree_sum(L) + tree_sum(R) + 1.

fib(N) when N < 2 -> N;
fib(N) -> fib(N - 1) + fib(N - 2).

%% modules ----------------------------------------------------------------------------------
%% Walker I of N starts chains at modules I, I + N, I + 2N, ...
walker(G, I, N, Depth) ->
    walk_all(G, I, N, Depth),
    walker(G, I, N, Depth).

walk_all(G, S, N, Depth) when S =< G ->
    M = mod(S),
    _ = M:step(Depth, S),
    walk_all(G, S + N, N, Depth);
walk_all(_G, _S, _N, _Depth) ->
    ok.

mod(I) -> list_to_atom("bm_" ++ integer_to_list(I)).

next(I, G) -> (I * 7 + 13) rem G + 1.

%% Compiles bm_1 .. bm_G into Dir, in parallel over the schedulers.
gen_modules(Dir, G) ->
    ok = filelib:ensure_dir(filename:join(Dir, "x")),
    N = erlang:system_info(schedulers_online),
    Self = self(),
    Pids = [spawn_link(fun() ->
                               [write_module(Dir, I, G) || I <- lists:seq(K, G, N)],
                               Self ! {self(), done}
                       end) || K <- lists:seq(1, N)],
    [receive {P, done} -> ok end || P <- Pids],
    ok.

write_module(Dir, I, G) ->
    Name = "bm_" ++ integer_to_list(I),
    Next = "bm_" ++ integer_to_list(next(I, G)),
    Src = [
        "-module(", Name, ").\n",
        "-export([step/2, info/0]).\n",
        %% A real call into the next module: its result is used afterwards.
        "step(0, Acc) -> leaf(Acc band 255, Acc);\n",
        "step(D, Acc) -> R = ", Next, ":step(D - 1, mix(Acc)), R + 1.\n",
        "mix(A) -> ((A * 31) bxor (A bsr 2)) band 16#ffffff.\n",
        "leaf(K, Acc) -> spin(", integer_to_list(?LEAF_SPIN), " + K, Acc).\n",
        "spin(0, A) -> A;\n",
        "spin(N, A) -> spin(N - 1, ((A bxor N) + (A bsr 3)) band 16#ffffff).\n",
        "info() -> {", integer_to_list(I), ", ", Next, "}.\n"],
    Forms = forms(lists:flatten(Src)),
    {ok, Mod, Bin} = compile:forms(Forms, [binary, report_errors]),
    ok = file:write_file(filename:join(Dir, atom_to_list(Mod) ++ ".beam"), Bin).

forms(Text) -> forms(Text, 1, []).

forms(Text, Line, Acc) ->
    case erl_scan:tokens([], Text, Line) of
        {done, {ok, Toks, End}, Rest} ->
            {ok, Form} = erl_parse:parse_form(Toks),
            forms(Rest, End, [Form | Acc]);
        {more, _} ->
            lists:reverse(Acc)
    end.
