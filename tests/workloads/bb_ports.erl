%% A workload of port work (tests/integration/port_test.cpp): loopback gen_tcp sockets (the
%% inet driver's tcp_inet ports), whose input arrives as port tasks on the schedulers.
%%   - bb_port_sink owns 2 accepted sockets in active mode: the driver reads each as a port
%%     task and sends it the data as messages, which it drops;
%%   - bb_port_pull owns 2 more in passive mode, reading with gen_tcp:recv/2;
%%   - 4 unnamed writers send 64 KiB binaries to the other ends as fast as they can;
%%   - bb_port_spin and bb_port_spin2, registered busy loops: Erlang work beside the ports', so
%%     that the port tasks take 5 to 10% of the samples (the share two samplers at once read
%%     alike: each one's handler time is the other's to sample).
%%   erl -noshell +S 2 -pa DIR -eval 'bb_ports:main()'
%% prints `ready <bb_port_sink pid> <bb_port_pull pid>`; halts at the end of its input.
-module(bb_ports).
-export([main/0]).

main() ->
    {ok, L} = gen_tcp:listen(0, [binary, {active, false}, {reuseaddr, true}, {ip, {127, 0, 0, 1}}]),
    {ok, Port} = inet:port(L),
    Sink = owner(bb_port_sink, L, Port, true),
    Pull = owner(bb_port_pull, L, Port, false),
    register(bb_port_spin, spawn(fun() -> spin(0) end)),
    register(bb_port_spin2, spawn(fun() -> spin(0) end)),
    io:format("ready ~s ~s~n", [pid_to_list(Sink), pid_to_list(Pull)]),
    io:get_line(''),
    erlang:halt(0).

%% A registered process that owns 2 accepted sockets, each fed by a writer of its own.
owner(Name, L, Port, Active) ->
    Self = self(),
    Pid = spawn(fun() ->
                        register(Name, self()),
                        Socks = [accept(L, Port) || _ <- lists:seq(1, 2)],
                        Self ! {accepted, self()},
                        case Active of
                            true ->
                                [ok = inet:setopts(S, [{active, true}]) || S <- Socks],
                                sink();
                            false ->
                                pull(Socks)
                        end
                end),
    receive {accepted, Pid} -> Pid end.

accept(L, Port) ->
    spawn(fun() -> writer(Port) end),
    {ok, S} = gen_tcp:accept(L),
    S.

writer(Port) ->
    {ok, S} = gen_tcp:connect({127, 0, 0, 1}, Port, [binary, {active, false}, {sndbuf, 262144}]),
    write(S, binary:copy(<<"0123456789abcdef">>, 4096)).

write(S, Bin) ->
    ok = gen_tcp:send(S, Bin),
    write(S, Bin).

sink() ->
    receive _ -> ok end,
    sink().

pull(Socks) ->
    [{ok, _} = gen_tcp:recv(S, 0) || S <- Socks],
    pull(Socks).

spin(N) -> spin((N * 7 + 1) rem 1000003).
