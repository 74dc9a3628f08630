%% The workload of beam-bpf-procs --stacks (tests/integration/stacks_test.cpp): processes whose
%% stacks are known and do not move.
%%   - 100 receivers, each in a bare receive that never matches, in wait_here/0 called from
%%     receiver/0;
%%   - bb_stacks_server, a gen_server that sleeps in its handle_call/3 (for an hour), and 50
%%     clients blocked in gen_server:call/3 to it (infinity), called from client/0;
%%   - one process 30,000 calls deep in deep/1 (a stack deeper than the tool reads), then in
%%     wait_here/0;
%%   - 3 busy loops, running or runnable.
%%   erl -noshell -pa DIR -eval 'bb_stacks:main()'
%% prints `ready <server> <deep> <busy>...` once every receiver and client waits where it
%% should, then reads commands: `stacks` prints what the VM itself says of them,
%% `stack <kind> <pid> <status> <top function> <second function>` for each (kind: receiver,
%% client, server, deep; functions as M:F/A, from process_info(P, [status, current_stacktrace])),
%% then `stacks_end`; `quit` or end of input halts.
%%
%%   erl -noshell -pa DIR -eval 'bb_stacks:main(flip)'
%% runs 200 flippers instead, each woken every millisecond by a pinger: a flipper alternates between
%% waiting in wait_a/0 (called from side_a/1) and in wait_b/0 (from side_b/1), both called
%% from flipper/1, so its stack changes all the time, always to one of a few known shapes.
%% Prints `ready`, then halts at `quit` or end of input.
-module(bb_stacks).
-behaviour(gen_server).
-export([main/0, main/1, receiver/0, client/0, deep/1, busy/1, flipper/1, pinger/1]).
-export([init/1, handle_call/3, handle_cast/2]).

-define(RECEIVERS, 100).
-define(CLIENTS, 50).
-define(DEPTH, 30000).
-define(BUSY, 3).
%% busy/2 stops when its counter equals this, which it never does (-1, from spawn's
%% arguments: the compiler cannot see it, and keeps the loop a loop).
-define(NEVER, -1).

main() ->
    {ok, Server} = gen_server:start({local, bb_stacks_server}, ?MODULE, [], []),
    Receivers = [spawn(?MODULE, receiver, []) || _ <- lists:seq(1, ?RECEIVERS)],
    Clients = [spawn(?MODULE, client, []) || _ <- lists:seq(1, ?CLIENTS)],
    Deep = spawn(?MODULE, deep, [?DEPTH]),
    Busy = [spawn(?MODULE, busy, [?NEVER]) || _ <- lists:seq(1, ?BUSY)],
    Kinds = [{receiver, P} || P <- Receivers] ++ [{client, P} || P <- Clients] ++
        [{server, Server}, {deep, Deep}],
    settle(Kinds, 2000),
    io:format("ready ~s ~s~s~n", [pid_to_list(Server), pid_to_list(Deep),
                                  [[$\s | pid_to_list(P)] || P <- Busy]]),
    loop(Kinds).

main(flip) ->
    Flippers = [spawn(?MODULE, flipper, [K]) || K <- lists:seq(1, 200)],
    spawn(?MODULE, pinger, [Flippers]),
    io:format("ready~n"),
    loop([]).

%% Until each process waits where its kind should (the clients in gen:do_call, the server in
%% its sleep), 10 ms apart, at most N times.
settle(Kinds, N) ->
    Ready = lists:all(fun({Kind, P}) -> where(P) =:= expected(Kind) end, Kinds),
    if
        Ready -> ok;
        N =:= 0 -> io:format("not_settled~n"), erlang:halt(1);
        true -> timer:sleep(10), settle(Kinds, N - 1)
    end.

expected(receiver) -> {waiting, {?MODULE, wait_here, 0}};
expected(client) -> {waiting, {gen, do_call, 4}};
expected(server) -> {waiting, {timer, sleep, 1}};
expected(deep) -> {waiting, {?MODULE, wait_here, 0}}.

where(P) ->
    case erlang:process_info(P, [status, current_function]) of
        [{status, S}, {current_function, F}] -> {S, F};
        _ -> gone
    end.

loop(Kinds) ->
    case io:get_line('') of
        "stacks" ++ _ ->
            [print(Kind, P) || {Kind, P} <- Kinds],
            io:format("stacks_end~n"),
            loop(Kinds);
        "quit" ++ _ -> erlang:halt(0);
        eof -> erlang:halt(0);
        {error, _} -> erlang:halt(0);
        _ -> loop(Kinds)
    end.

print(Kind, P) ->
    [{status, S}, {current_stacktrace, Trace}] = erlang:process_info(P, [status, current_stacktrace]),
    Names = [io_lib:format("~w:~w/~w", [M, F, if is_list(A) -> length(A); true -> A end])
             || {M, F, A, _} <- lists:sublist(Trace, 2)],
    io:format("stack ~w ~s ~w~s~n", [Kind, pid_to_list(P), S, [[$\s | N] || N <- Names]]).

%% --- the processes ------------------------------------------------------------------------
receiver() ->
    R = wait_here(),
    exit(R).

wait_here() ->
    receive
        never_sent -> ok
    end.

client() ->
    R = gen_server:call(bb_stacks_server, block, infinity),
    exit(R).

%% Not a tail call: each level keeps its frame (the list is built after the call returns).
deep(0) -> [wait_here()];
deep(N) -> [deep(N - 1)].

%% Each level a real call (its result is used after it): the frames stay on the stack.
flipper(N) ->
    A = side_a(N),
    B = side_b(A),
    flipper(B).

side_a(N) ->
    wait_a(),
    N.

side_b(N) ->
    wait_b(),
    N.

wait_a() ->
    receive
        flip -> ok
    end.

wait_b() ->
    receive
        flip -> ok
    end.

%% A flip to each every millisecond: their queues stay short.
pinger(Ps) ->
    [P ! flip || P <- Ps],
    receive after 1 -> ok end,
    pinger(Ps).

busy(Never) -> busy(0, Never).

busy(Never, Never) -> ok;
busy(N, Never) -> busy(N + 1, Never).

%% --- bb_stacks_server -----------------------------------------------------------------------
init([]) -> {ok, none}.

handle_call(block, _From, S) ->
    timer:sleep(3600 * 1000),
    {reply, ok, S}.

handle_cast(_, S) -> {noreply, S}.
