%% ETS tables, for beam-bpf-procs --ets against the VM's own ets:info/2.
%%
%% main(tables): ten tables of every type (set, ordered_set, bag, duplicate_bag), named and
%% unnamed, public, protected and private, with read and write concurrency, decentralized
%% counters and a write-concurrent ordered_set (a CA tree); holding small terms, binaries (heap
%% and refc) and big tuples; made by two owners. Prints `ready`; then each `info` line on stdin
%% prints `ets <ref> <name> <named> <type> <protection> <owner> <size> <memory> <read_conc>
%% <write_conc> <decentralized>` for every table of the VM (ets:all()), and `ets_end`.
%%
%% main(growing): a table named bb_growing gains a 1 KiB binary and a 100-element tuple every
%% 10 ms (600 in all); others hold still. Prints `ready`.
-module(bb_ets).
-export([main/1]).

main(tables) ->
    Self = self(),
    Owner = spawn(fun() ->
                          make(Self, [{t_bag, [bag, public]}, {t_dbag, [duplicate_bag, private, named_table]}]),
                          receive stop -> ok end
                  end),
    receive {made, Owner} -> ok end,
    make(Self, [{t_set, [set, public, named_table, {read_concurrency, true}]},
                {t_set_anon, [set, protected]},
                {t_ordered, [ordered_set, private]},
                {t_ordered_named, [ordered_set, public, named_table]},
                {t_catree, [ordered_set, public, {write_concurrency, true}]},
                {t_wc, [set, public, {write_concurrency, true}, {read_concurrency, true}]},
                {t_dc, [set, public, {write_concurrency, true}, {decentralized_counters, true}]},
                {t_empty, [bag, protected, named_table]}]),
    receive {made, Self} -> ok end,
    io:format("ready~n"),
    loop();
main(growing) ->
    T = ets:new(bb_growing, [set, public, named_table]),
    ets:new(bb_still, [set, public, named_table]),
    spawn(fun() -> grow(T, 600) end),
    io:format("ready~n"),
    receive stop -> ok end.

make(Parent, Specs) ->
    [fill(Name, ets:new(Name, Opts)) || {Name, Opts} <- Specs],
    %% Unnamed tables are kept alive by their owner, not by a reference to them.
    Parent ! {made, self()}.

fill(t_empty, _) -> ok;
fill(Name, T) ->
    N = erlang:phash2(Name, 400) + 100,
    [begin
         Key = I rem (N div 2),  % a bag keeps each object; a set the last of each key
         ets:insert(T, {Key, I, value(I)})
     end
     || I <- lists:seq(1, N)],
    ok.

value(I) when I rem 3 =:= 0 -> binary:copy(<<I:8>>, 200);          % off-heap (refc)
value(I) when I rem 3 =:= 1 -> list_to_tuple(lists:seq(1, 50));      % a big tuple
value(I) -> <<I:32, "small">>.                                       % a heap binary

loop() ->
    case io:get_line('') of
        "info" ++ _ ->
            [io:format("ets ~p ~p ~p ~p ~p ~p ~p ~p ~p ~p ~p~n",
                       [ets:info(T, id), ets:info(T, name), ets:info(T, named_table), ets:info(T, type),
                        ets:info(T, protection), ets:info(T, owner), ets:info(T, size), ets:info(T, memory),
                        ets:info(T, read_concurrency), ets:info(T, write_concurrency),
                        ets:info(T, decentralized_counters)])
             || T <- ets:all(), ets:info(T, id) =/= undefined],
            io:format("ets_end~n"),
            loop();
        _ -> erlang:halt(0)
    end.

grow(_, 0) -> ok;
grow(T, N) ->
    ets:insert(T, {N, binary:copy(<<N:8>>, 1024), list_to_tuple(lists:seq(1, 100))}),
    timer:sleep(10),
    grow(T, N - 1).
