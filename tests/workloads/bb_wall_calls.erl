%% The workload of -e wall's callees beyond gen:do_call/4 (tests/integration/wall_test.cpp):
%%   - 20 clients inserting into one dets table in a loop: all but one wait in dets:req/2 for
%%     the table's server at any moment;
%%   - 10 clients writing with io:format/3 to an I/O server that takes 5 ms a request: they
%%     wait in io:execute_request/3.
%%   erl -noshell +S 2 -pa DIR -eval 'bb_wall_calls:main()'
%% prints `ready <dets server pid> <I/O server pid>`; halts at the end of its input.
-module(bb_wall_calls).
-export([main/0]).

main() ->
    File = filename:join("/tmp", "bb_wall_calls_" ++ os:getpid() ++ ".dets"),
    file:delete(File),
    {ok, T} = dets:open_file(bb_wall_calls, [{file, File}]),
    Io = spawn(fun slow_io/0),
    [spawn(fun() -> dets_client(T, I) end) || I <- lists:seq(1, 20)],
    [spawn(fun() -> io_client(Io) end) || _ <- lists:seq(1, 10)],
    io:format("ready ~s ~s~n", [pid_to_list(dets:info(T, pid)), pid_to_list(Io)]),
    io:get_line(''),
    file:delete(File),
    erlang:halt(0).

dets_client(T, I) ->
    ok = dets:insert(T, {I, lists:seq(1, 2000)}),
    dets_client(T, I).

%% An I/O server that answers every request after 5 ms (the I/O protocol: {io_request, From,
%% ReplyAs, Request} answered by {io_reply, ReplyAs, Reply}).
slow_io() ->
    receive
        {io_request, From, ReplyAs, _Request} ->
            timer:sleep(5),
            From ! {io_reply, ReplyAs, ok}
    end,
    slow_io().

io_client(Io) ->
    ok = io:format(Io, "x~n", []),
    io_client(Io).
