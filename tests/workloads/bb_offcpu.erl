%% The workload of -e offcpu's tests (tests/integration/offcpu_test.cpp).
%%   erl -noshell -pa DIR -eval 'bb_offcpu:main("PATH/sleep_nif")'
%% loads the blocking NIF (tests/fixtures/sleep_nif.c), prints `ready`, then reads commands:
%%   - `sleeper MS N`: one process calls the NIF N times, MS ms a call, from sleeper/2: the
%%     scheduler running it blocks in nanosleep (as a badly written NIF makes it), then it ends;
%%   - `churn N M`: N pairs of processes ping-pong a message M times, then wait 2 ms, forever:
%%     schedulers that block and wake hundreds to thousands of times a second;
%%   - `ets N`: N processes insert into one named public table, bb_hot, without
%%     write_concurrency, as fast as they can: its lock is contended; a second table, bb_cold,
%%     gets one insert a millisecond;
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
        "slept" ++ _ ->
            io:format("slept ~p~n", [slept_ns()]),
            loop();
        "quit" ++ _ -> erlang:halt(0);
        eof -> erlang:halt(0);
        {error, _} -> erlang:halt(0);
        _ -> loop()
    end.

sleeper(_Ms, 0) -> ok;
sleeper(Ms, N) ->
    nif_sleep(Ms),
    sleeper(Ms, N - 1).

nif_sleep(_Ms) -> erlang:nif_error(not_loaded).
slept_ns() -> erlang:nif_error(not_loaded).

hammer(T, I, K) ->
    ets:insert(T, {K band 1023, I, K}),
    hammer(T, I, K + 1).

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
