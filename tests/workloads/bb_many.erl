%% Many busy processes (tests/integration/agent_labels_test.cpp): what made a series of nearly
%% every sample when each carried its process's pid.
%%
%%   erl -noshell -pa DIR -eval 'bb_many:main(10000)'
%%
%% Spawns N processes that each spin on arithmetic forever, registers the first 10 (bb_many_1
%% ...), prints `ready`, and waits (the VM is killed by the test).
-module(bb_many).
-export([main/1, spin/1]).

main(N) ->
    Pids = [spawn(?MODULE, spin, [I]) || I <- lists:seq(1, N)],
    [register(list_to_atom("bb_many_" ++ integer_to_list(I)), P)
     || {I, P} <- lists:zip(lists:seq(1, min(10, N)), lists:sublist(Pids, min(10, N)))],
    io:format("ready~n"),
    receive stop -> ok end.

spin(A) -> spin((A * 31 + 7) band 16#fffff).
