%% A hidden control node for the real applications of apps_test.cpp: connected to the
%% application's node (RabbitMQ, ejabberd, an Elixir script) for the whole test, it answers
%% commands read from stdin with what that node says of itself (rpc), one line each:
%%   count                -> "count N": erlang:system_info(process_count) on the node, less the
%%                           process erpc spawns there to run the call
%%   registered           -> "registered NAME ...": the node's registered names
%%   busiest MODULE       -> "busiest PID": of the node's processes started in MODULE (proc_lib's
%%                           initial call, else the VM's), the one with the most reductions,
%%                           as the node prints its pid
%%   register USER HOST PASS -> "register ok|..." (ejabberd_auth:try_register/3)
-module(bb_remote).
-export([main/1]).

main(Node) ->
    case net_adm:ping(Node) of
        pong -> io:format("connected ~s~n", [Node]), loop(Node);
        pang -> io:format("no_connection ~s~n", [Node]), halt(1)
    end.

loop(Node) ->
    case io:get_line("") of
        eof -> halt(0);
        Line ->
            reply(Node, string:lexemes(string:trim(Line), " ")),
            loop(Node)
    end.

reply(Node, ["count"]) ->
    io:format("count ~p~n", [rpc:call(Node, erlang, system_info, [process_count]) - 1]);
reply(Node, ["registered"]) ->
    Names = rpc:call(Node, erlang, registered, []),
    io:format("registered ~ts~n", [lists:join(" ", [atom_to_list(N) || N <- Names])]);
reply(Node, ["busiest", Mod]) ->
    M = list_to_atom(Mod),
    Started = [{R, P} || P <- rpc:call(Node, erlang, processes, []),
                         {R, Init} <- [reds_and_init(Node, P)], started_in(Init, M)],
    case lists:reverse(lists:sort(Started)) of
        [{_, P} | _] -> io:format("busiest ~s~n", [rpc:call(Node, erlang, pid_to_list, [P])]);
        [] -> io:format("busiest none~n")
    end;
reply(Node, ["register", User, Host, Pass]) ->
    R = rpc:call(Node, ejabberd_auth, try_register, [list_to_binary(User), list_to_binary(Host),
                                                    list_to_binary(Pass)]),
    io:format("register ~p~n", [R]);
reply(_, Other) ->
    io:format("unknown ~p~n", [Other]).

reds_and_init(Node, P) ->
    case rpc:call(Node, erlang, process_info, [P, [reductions, initial_call, dictionary]]) of
        [{reductions, R}, {initial_call, I}, {dictionary, D}] ->
            {R, proplists:get_value('$initial_call', D, I)};
        _ -> {0, none}
    end.

started_in({M, _, _}, M) -> true;
started_in(_, _) -> false.
