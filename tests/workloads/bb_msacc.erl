%% A mixed workload for the schedulers' states (tests/integration/port_test.cpp's msacc test):
%% busy Erlang code, garbage collections, socket I/O (port tasks and polling), and idle time,
%% none of them filling a scheduler.
%%   - bb_msacc_busy: 4 ms of a busy loop, then 4 ms asleep, over and over;
%%   - bb_msacc_gc: builds and drops 20,000-element lists (its collections), 2 ms asleep between;
%%   - a writer sending 16 KiB every millisecond over loopback to bb_msacc_sink's active socket.
%%   erl -noshell +S 2 -pa DIR -eval 'bb_msacc:main()'
%% prints `ready`; then for each line `msacc MS` it reads, runs msacc:start(MS) and prints
%% `msacc STATE=US ...`: each state's microseconds, summed over the normal schedulers.
-module(bb_msacc).
-export([main/0]).

main() ->
    {ok, L} = gen_tcp:listen(0, [binary, {active, false}, {reuseaddr, true}, {ip, {127, 0, 0, 1}}]),
    {ok, Port} = inet:port(L),
    spawn(fun() -> writer(Port) end),
    {ok, S} = gen_tcp:accept(L),
    Sink = spawn(fun() -> register(bb_msacc_sink, self()), sink() end),
    ok = gen_tcp:controlling_process(S, Sink),
    ok = inet:setopts(S, [{active, true}]),
    register(bb_msacc_busy, spawn(fun() -> busy() end)),
    register(bb_msacc_gc, spawn(fun() -> gc() end)),
    io:format("ready~n"),
    commands().

commands() ->
    case io:get_line('') of
        "msacc " ++ Ms ->
            msacc:start(list_to_integer(string:trim(Ms))),
            Scheds = [C || #{type := scheduler, counters := C} <- msacc:stats()],
            Sum = lists:foldl(fun(C, Acc) -> maps:fold(fun(K, V, A) -> maps:update_with(K, fun(X) -> X + V end, V, A) end, Acc, C) end,
                              #{}, Scheds),
            io:format("msacc~s~n", [[io_lib:format(" ~p=~p", [K, V]) || {K, V} <- lists:sort(maps:to_list(Sum))]]),
            commands();
        _ ->
            erlang:halt(0)
    end.

writer(Port) ->
    {ok, S} = gen_tcp:connect({127, 0, 0, 1}, Port, [binary, {active, false}]),
    write(S, binary:copy(<<"0123456789abcdef">>, 1024)).

write(S, Bin) ->
    ok = gen_tcp:send(S, Bin),
    timer:sleep(1),
    write(S, Bin).

sink() ->
    receive _ -> ok end,
    sink().

busy() ->
    spin_until(erlang:monotonic_time(microsecond) + 4000, 0),
    timer:sleep(4),
    busy().

spin_until(End, N) ->
    case N rem 1000 =:= 0 andalso erlang:monotonic_time(microsecond) >= End of
        true -> ok;
        false -> spin_until(End, N + 1)
    end.

gc() ->
    _ = length(lists:seq(1, 20000)),
    timer:sleep(2),
    gc().
