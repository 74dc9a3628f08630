%% The demo VM that scripts/demo.sh profiles: a few kinds of everyday BEAM work at once, so
%% the report has something to say. Runs until killed.
-module(demo_workload).
-behaviour(gen_server).
-export([start/0]).
-export([init/1, handle_call/3, handle_cast/2]).

%% The processes are named as they would be in an application, so --by-process, pprof's
%% `process` label and beam-bpf-procs show those names: registered names, a process label (as
%% proc_lib:set_label/1 stores it), and one known only by its initial call.
start() ->
    spawn_link(fun() -> register(demo_sorter, self()), sorter() end),
    spawn_link(fun() -> register(demo_encoder, self()), encoder() end),
    spawn_link(fun() -> put('$process_label', {ets_writer, demo}), ets_writer(ets:new(demo, [set, public])) end),
    Server = spawn_link(fun() -> register(demo_counter, self()), counter_server(0) end),
    spawn_link(fun() -> counter_client(Server) end),
    Cache = spawn_link(fun() -> register(demo_cache, self()), cache(#{}, []) end),
    spawn_link(fun() -> cache_filler(Cache, 0) end),
    {ok, _} = gen_server:start_link({local, demo_db}, ?MODULE, [], []),
    [spawn_link(fun request/0) || _ <- lists:seq(1, 20)],
    io:format("demo workload running in ~s~n", [os:getpid()]),
    receive stop -> ok end.

%% Sorting random lists: lists:sort/1 and the random number generator.
sorter() ->
    L = [rand:uniform(1000000) || _ <- lists:seq(1, 20000)],
    _ = lists:sort(L),
    sorter().

%% Term to iolist to binary: the shape of an encoder in a web request.
encoder() ->
    Doc = #{name => <<"beam">>, tags => [a, b, c], values => lists:seq(1, 200)},
    _ = iolist_to_binary(encode(Doc)),
    encoder().

encode(M) when is_map(M) ->
    ["{", lists:join(",", [[encode(K), ":", encode(V)] || {K, V} <- maps:to_list(M)]), "}"];
encode(L) when is_list(L) -> ["[", lists:join(",", [encode(X) || X <- L]), "]"];
encode(A) when is_atom(A) -> [$", atom_to_list(A), $"];
encode(B) when is_binary(B) -> [$", B, $"];
encode(I) when is_integer(I) -> integer_to_list(I).

ets_writer(T) ->
    [ets:insert(T, {K, K * 2}) || K <- lists:seq(1, 5000)],
    [ets:lookup(T, K) || K <- lists:seq(1, 5000)],
    ets_writer(T).

%% A cache that keeps what it is sent: a map of sessions and the last few payloads (binaries
%% off the heap), filled a little every 100 ms. beam-bpf-procs --inspect demo_cache shows them.
cache(Sessions, Recent) ->
    receive
        {put, Id, Session, Payload} ->
            cache(Sessions#{Id => Session}, lists:sublist([Payload | Recent], 5))
    end.

cache_filler(Cache, N) ->
    Id = N rem 50,
    Cache ! {put, Id, #{user => list_to_binary(["user", integer_to_list(Id)]), hits => N},
             binary:copy(<<N:8>>, 100000)},
    timer:sleep(100),
    cache_filler(Cache, N + 1).

%% Message passing: a client calling a server in a loop.
counter_server(N) ->
    receive {From, incr} -> From ! {self(), N + 1}, counter_server(N + 1) end.

counter_client(Server) ->
    Server ! {self(), incr},
    receive {Server, _} -> ok end,
    counter_client(Server).

%% A slow server and the requests queued on it (2 ms a call, 20 callers): what
%% beam-bpf-sample -e wall shows as [waiting for demo_db, pid ...].
request() ->
    {ok, _} = gen_server:call(demo_db, query, infinity),
    request().

init([]) -> {ok, 0}.

handle_call(query, _From, N) ->
    timer:sleep(2),
    {reply, {ok, N}, N + 1}.

handle_cast(_, N) -> {noreply, N}.
