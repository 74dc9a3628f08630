%% The workload of -e offcpu's tests (tests/integration/offcpu_test.cpp).
%%   erl -noshell -pa DIR -eval 'bb_offcpu:main("PATH/sleep_nif")'
%% loads the blocking NIF (tests/fixtures/sleep_nif.c), prints `ready`, then reads commands:
%%   - `sleeper MS N`: one process calls the NIF N times, MS ms a call, from sleeper/2: the
%%     scheduler running it blocks in nanosleep (as a badly written NIF makes it), then it prints
%%     `sleeper_done` and ends;
%%   - `churn N M`: N pairs of processes ping-pong a message M times, then wait 2 ms, forever:
%%     schedulers that block and wake hundreds to thousands of times a second;
%%   - `ets N`: N processes insert into one named public table, bb_hot, without
%%     write_concurrency, as fast as they can: its lock is contended; a second table, bb_cold,
%%     gets one insert a millisecond;
%%   - `ets_convoy N LEN`: N processes insert LEN-element lists into bb_hot (a copy of about
%%     LEN x 5 ns under the write lock), a convoy when it forms: each release hands the lock to a
%%     blocked waiter and the releasing scheduler blocks in turn (docs/offcpu-profiling.md);
%%   - `convoy_job N LEN ROUNDS`: N processes insert ROUNDS LEN-element lists each into bb_hot,
%%     then end; prints `convoy_done` when all have: a bounded episode of contention;
%%   - `lcnt MS` (the lock-counting emulator only): clears the VM's lock counters, waits MS ms,
%%     and prints `lcnt DURATION_NS TOP_NAME TOP_ID TOP_NS HOT_NS RUNQ_NS`: lcnt's window, the
%%     lock with the most wait time and its time, bb_hot's table lock's time and the run queues';
%%   - `lcnt_clear`, then `lcnt_collect`: the same over the window between the two commands
%%     (`lcnt_cleared` is printed at the first; the second prints the `lcnt ...` line);
%%   - `slept`: prints `slept NS`, the nanoseconds the NIF has slept so far (its own clock);
%%   - `quit` or end of input halts.
-module(bb_offcpu).
-export([main/1, sleeper/2, nif_sleep/1, slept_ns/0, pinger/1]).

main(NifPath) ->
    ok = erlang:load_nif(NifPath, 0),
    io:format("ready~n"),
    loop().

loop() ->
    case io:get_line('') of
        "sleeper " ++ Args ->
            [Ms, N] = [list_to_integer(A) || A <- string:lexemes(Args, " \n")],
            spawn(?MODULE, sleeper, [Ms, N]),
            io:format("sleeper~n"),
            loop();
        "churn " ++ Args ->
            [N, M] = [list_to_integer(A) || A <- string:lexemes(Args, " \n")],
            [spawn(fun() -> pair(M) end) || _ <- lists:seq(1, N)],
            io:format("churn~n"),
            loop();
        "ets " ++ N ->
            ets:new(bb_hot, [named_table, public, set]),
            ets:new(bb_cold, [named_table, public, set]),
            [spawn(fun() -> hammer(bb_hot, I, 0) end) || I <- lists:seq(1, list_to_integer(string:trim(N)))],
            spawn(fun() -> trickle(0) end),
            io:format("ets~n"),
            loop();
        "ets_convoy " ++ Args ->
            [N, Len] = [list_to_integer(A) || A <- string:lexemes(Args, " \n")],
            ets:new(bb_hot, [named_table, public, set]),
            Big = lists:seq(1, Len),
            [spawn(fun() -> hammer_big(I, 0, Big) end) || I <- lists:seq(1, N)],
            io:format("ets_convoy~n"),
            loop();
        "convoy_job " ++ Args ->
            [N, Len, Rounds] = [list_to_integer(A) || A <- string:lexemes(Args, " \n")],
            convoy_job(N, Len, Rounds),
            loop();
        "lcnt " ++ Ms ->
            lcnt(list_to_integer(string:trim(Ms))),
            loop();
        "lcnt_clear" ++ _ ->
            erts_debug:lcnt_clear(),
            io:format("lcnt_cleared~n"),
            loop();
        "lcnt_collect" ++ _ ->
            lcnt_collect(),
            loop();
        "slept" ++ _ ->
            io:format("slept ~p~n", [slept_ns()]),
            loop();
        "quit" ++ _ -> erlang:halt(0);
        eof -> erlang:halt(0);
        {error, _} -> erlang:halt(0);
        _ -> loop()
    end.

sleeper(_Ms, 0) -> io:format("sleeper_done~n");
sleeper(Ms, N) ->
    nif_sleep(Ms),
    sleeper(Ms, N - 1).

nif_sleep(_Ms) -> erlang:nif_error(not_loaded).
slept_ns() -> erlang:nif_error(not_loaded).

hammer(T, I, K) ->
    ets:insert(T, {K band 1023, I, K}),
    hammer(T, I, K + 1).

hammer_big(I, K, Big) ->
    ets:insert(bb_hot, {K band 15, I, Big}),
    hammer_big(I, K + 1, Big).

%% N processes each insert ROUNDS LEN-element lists into bb_hot, then end; `convoy_done` is
%% printed when all have. A bounded episode of contention, between idle times.
convoy_job(N, Len, Rounds) ->
    catch ets:new(bb_hot, [named_table, public, set]),
    Big = lists:seq(1, Len),
    Self = self(),
    Pids = [spawn(fun() -> insert_big(I, Rounds, Big), Self ! {done, self()} end) || I <- lists:seq(1, N)],
    [receive {done, P} -> ok end || P <- Pids],
    io:format("convoy_done~n").

insert_big(_I, 0, _Big) -> ok;
insert_big(I, K, Big) ->
    ets:insert(bb_hot, {K band 15, I, Big}),
    insert_big(I, K - 1, Big).

%% At the highest priority: its window's end is not late behind the workload's processes.
lcnt(Ms) ->
    process_flag(priority, max),
    erts_debug:lcnt_clear(),
    timer:sleep(Ms),
    lcnt_collect(),
    process_flag(priority, normal).

lcnt_collect() ->
    Data = erts_debug:lcnt_collect(),
    {duration, {S, Ns}} = lists:keyfind(duration, 1, Data),
    {locks, Locks} = lists:keyfind(locks, 1, Data),
    %% Each lock's wait time, summed over where it was taken: {{File, Line}, {Tries, Collisions,
    %% {S, Ns, N}}, Histogram}.
    Waits = [{lists:sum([Ws * 1000000000 + Wns || {_, {_, _, {Ws, Wns, _}}, _} <- Stats]), Name, Id}
             || {Name, Id, _Type, Stats} <- Locks],
    {TopNs, TopName, TopId} = lists:max(Waits),
    Hot = lists:sum([W || {W, db_tab, bb_hot} <- Waits]),
    RunQueues = lists:sum([W || {W, run_queue, _} <- Waits]),
    io:format("lcnt ~p ~p ~p ~p ~p ~p~n", [S * 1000000000 + Ns, TopName, TopId, TopNs, Hot, RunQueues]).

trickle(K) ->
    ets:insert(bb_cold, {K band 1023, K}),
    timer:sleep(1),
    trickle(K + 1).

pair(M) ->
    Peer = spawn(?MODULE, pinger, [self()]),
    pair(Peer, M).

pair(Peer, M) ->
    [begin Peer ! {ping, self()}, receive pong -> ok end end || _ <- lists:seq(1, M)],
    timer:sleep(2),
    pair(Peer, M).

pinger(From) ->
    receive {ping, From} -> From ! pong, pinger(From) end.
