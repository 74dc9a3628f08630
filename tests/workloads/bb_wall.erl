%% The workload of beam-bpf-sample -e wall (tests/integration/wall_test.cpp), with a known truth
%% and the VM's own view of it:
%%   - bb_wall_server, a gen_server whose handle_call/3 takes ~5 ms (a timer:sleep/1), and 200
%%     clients calling it in a loop: they spend nearly all their time waiting in gen:do_call/4;
%%   - 100 receivers in a bare receive that never matches: 50 with an empty queue, 50 with 20
%%     messages it does not match in their queue;
%%   - 20 busy loops, on the 2 schedulers the test starts the VM with (+S 2): running or
%%     runnable.
%%   erl -noshell +S 2 -pa DIR -eval 'bb_wall:main()'
%% prints `ready <server pid> <process count>` when all are started, then reads commands:
%%   - `oracle_start`: an in-VM sampler (at high priority, so that it samples on time although
%%     the busy loops hold both schedulers) takes 64 random processes every 50 ms and records
%%     process_info(P, [status, current_stacktrace, message_queue_len]) of each;
%%     It also reads the VM's counters of the same instant: statistics(total_run_queue_lengths_all)
%%     (processes queued for a scheduler: runnable) and statistics(total_active_tasks_all)
%%     (those and the ones running), and the number of processes;
%%   - `oracle_stop`: prints what it recorded, one line per (status, top frame, second frame,
%%     queue length bucket): `oracle <count> <status> <M:F/A> <M:F/A or -> <bucket or ->`, then
%%     `oracle_tasks <ticks> <sum of queued> <sum of active> <sum of processes>` and
%%     `oracle_end <samples>`;
%%   - `quit` or end of input halts.
%%
%%   erl -noshell -pa DIR -eval 'bb_wall:main(churn)'
%% runs a spawner of short-lived workers instead: each waits 0 to 3 ms in churn_wait/0 (called
%% from churn_worker/0) and exits, 20 spawned every millisecond, with 100 receivers beside them.
%% Prints `ready`; `quit` or end of input halts.
-module(bb_wall).
-behaviour(gen_server).
-export([main/0, main/1, client/0, receiver/1, busy/1, oracle/1, churn_worker/0]).
-export([init/1, handle_call/3, handle_cast/2]).

-define(CLIENTS, 200).
-define(RECEIVERS, 100).
-define(BUSY, 20).
-define(NEVER, -1).  % busy/2 stops when its counter equals this: never (see bb_stacks.erl)
-define(PER_TICK, 64).
-define(TICK_MS, 50).

main() ->
    {ok, Server} = gen_server:start({local, bb_wall_server}, ?MODULE, [], []),
    [spawn(?MODULE, client, []) || _ <- lists:seq(1, ?CLIENTS)],
    [spawn(?MODULE, receiver, [case K rem 2 of 0 -> 0; 1 -> 20 end]) || K <- lists:seq(1, ?RECEIVERS)],
    [spawn(?MODULE, busy, [?NEVER]) || _ <- lists:seq(1, ?BUSY)],
    io:format("ready ~s ~w~n", [pid_to_list(Server), erlang:system_info(process_count)]),
    loop(none).

main(churn) ->
    [spawn(?MODULE, receiver, [0]) || _ <- lists:seq(1, ?RECEIVERS)],
    spawn(fun spawner/0),
    io:format("ready~n"),
    loop(none).

spawner() ->
    [spawn(?MODULE, churn_worker, []) || _ <- lists:seq(1, 20)],
    receive after 1 -> ok end,
    spawner().

churn_worker() ->
    churn_wait(),
    exit(normal).

churn_wait() ->
    receive never_sent -> ok after rand:uniform(4) - 1 -> ok end.

loop(Oracle) ->
    case io:get_line('') of
        "oracle_start" ++ _ ->
            loop(spawn_opt(?MODULE, oracle, [{#{}, {0, 0, 0, 0}}], [{priority, high}]));
        "oracle_stop" ++ _ ->
            Oracle ! {stop, self()},
            receive
                {oracle, {Counts, {Ticks, Queued, Active, Procs}}} ->
                    maps:foreach(fun(K, N) -> io:format("oracle ~w ~s~n", [N, K]) end, Counts),
                    io:format("oracle_tasks ~w ~w ~w ~w~n", [Ticks, Queued, Active, Procs]),
                    io:format("oracle_end ~w~n", [lists:sum(maps:values(Counts))])
            end,
            loop(none);
        "quit" ++ _ -> erlang:halt(0);
        eof -> erlang:halt(0);
        {error, _} -> erlang:halt(0);
        _ -> loop(Oracle)
    end.

%% --- the oracle ----------------------------------------------------------------------------
oracle({Counts, {Ticks, Queued, Active, Procs}} = State) ->
    receive
        {stop, To} -> To ! {oracle, State}
    after ?TICK_MS ->
        Q = erlang:statistics(total_run_queue_lengths_all),
        A = erlang:statistics(total_active_tasks_all),
        Ps = list_to_tuple(erlang:processes()),
        Picked = [element(rand:uniform(tuple_size(Ps)), Ps) || _ <- lists:seq(1, ?PER_TICK)],
        oracle({lists:foldl(fun(P, C) -> count(P, C) end, Counts, Picked),
                {Ticks + 1, Queued + Q, Active + A, Procs + tuple_size(Ps)}})
    end.

count(P, Counts) ->
    case erlang:process_info(P, [status, current_stacktrace, message_queue_len]) of
        [{status, S}, {current_stacktrace, Trace}, {message_queue_len, Q}] ->
            Names = [io_lib:format("~w:~w/~w", [M, F, if is_list(A) -> length(A); true -> A end])
                     || {M, F, A, _} <- lists:sublist(Trace, 2)],
            [F1, F2] = case Names of [] -> ["-", "-"]; [N1] -> [N1, "-"]; [N1, N2] -> [N1, N2] end,
            Bucket = case S of waiting -> bucket(Q); _ -> "-" end,
            Key = lists:flatten(io_lib:format("~w ~s ~s ~s", [S, F1, F2, Bucket])),
            maps:update_with(Key, fun(N) -> N + 1 end, 1, Counts);
        undefined -> Counts
    end.

bucket(0) -> "0";
bucket(Q) -> bucket(Q, 1).
bucket(Q, Low) when Q >= Low * 10 -> bucket(Q, Low * 10);
bucket(_, Low) -> integer_to_list(Low) ++ "-" ++ integer_to_list(Low * 10 - 1).

%% --- the processes ------------------------------------------------------------------------
client() ->
    ok = gen_server:call(bb_wall_server, work, infinity),
    client().

receiver(Queued) ->
    [self() ! unmatched || _ <- lists:seq(1, Queued)],
    wait_here().

wait_here() ->
    receive
        never_sent -> ok
    end.

busy(Never) -> busy(0, Never).

busy(Never, Never) -> ok;
busy(N, Never) -> busy(N + 1, Never).

%% --- bb_wall_server -------------------------------------------------------------------------
init([]) -> {ok, none}.

handle_call(work, _From, S) ->
    timer:sleep(5),
    {reply, ok, S}.

handle_cast(_, S) -> {noreply, S}.
