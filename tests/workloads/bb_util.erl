%% The workload of beam-bpf-procs --watch's scheduler utilization (tests/integration/
%% sched_util_test.cpp): one worker bound to each normal scheduler, busy for a share of every
%% 20 ms by the clock (a busy loop), idle in a receive the rest. scheduler_wall_time is turned
%% on: the VM's own count of each scheduler's busy time is the oracle.
%%   erl -noshell +S 2 -pa DIR -eval 'bb_util:main()'
%% prints `ready N` (normal schedulers), then reads commands:
%%   - `load MS`: each worker is busy MS of every 20 ms from now on; prints `load MS`;
%%   - `mark`: prints `mark ID:ACTIVE:TOTAL ...`, erlang:statistics(scheduler_wall_time_all):
%%     normal schedulers 1..N, then dirty CPU, then dirty IO ones;
%%   - `quit` or end of input halts.
-module(bb_util).
-export([main/0, worker/1]).

-define(PERIOD, 20).

main() ->
    erlang:system_flag(scheduler_wall_time, true),
    N = erlang:system_info(schedulers_online),
    Workers = [spawn_opt(?MODULE, worker, [0], [{scheduler, I}]) || I <- lists:seq(1, N)],
    io:format("ready ~p~n", [N]),
    loop(Workers).

loop(Workers) ->
    case io:get_line('') of
        "load " ++ Ms ->
            Busy = list_to_integer(string:trim(Ms)),
            [W ! {busy, Busy} || W <- Workers],
            io:format("load ~p~n", [Busy]),
            loop(Workers);
        "mark" ++ _ ->
            Times = lists:sort(erlang:statistics(scheduler_wall_time_all)),
            io:format("mark~s~n", [[io_lib:format(" ~p:~p:~p", [I, A, T]) || {I, A, T} <- Times]]),
            loop(Workers);
        "quit" ++ _ -> erlang:halt(0);
        eof -> erlang:halt(0);
        {error, _} -> erlang:halt(0);
        _ -> loop(Workers)
    end.

worker(Busy) ->
    T0 = erlang:monotonic_time(microsecond),
    spin_until(T0 + Busy * 1000),
    receive
        {busy, New} -> worker(New)
    after ?PERIOD - Busy -> worker(Busy)
    end.

spin_until(T) ->
    case erlang:monotonic_time(microsecond) >= T of
        true -> ok;
        false -> spin_until(T)
    end.
