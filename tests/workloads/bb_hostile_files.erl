%% The hostile fixture (tests/integration/hostile_files_test.cpp): a VM that loads a NIF library
%% (tests/fixtures/hostile_nif.c) the test then unlinks and plants things in place of, and that
%% starts threads on command.
%%   main(LibPath)  loads LibPath ++ ".so", prints "ready OSPID", then reads commands:
%%     spin             a process calling the NIF's C loop (hf_outer/hf_inner) 1 ms at a time
%%     threads N        N more OS threads, blocked; prints "threads STARTED"
%%     stop_threads     ends them
-module(bb_hostile_files).
-export([main/1, spin/1, threads/1, stop_threads/0]).

main(Lib) ->
    ok = erlang:load_nif(Lib, 0),
    io:format("ready ~s~n", [os:getpid()]),
    commands().

commands() ->
    case io:get_line("") of
        eof -> halt(0);
        Line ->
            case string:lexemes(string:trim(Line), " ") of
                ["spin"] -> spawn(fun spin_loop/0), io:format("spinning~n");
                ["threads", N] -> io:format("threads ~p~n", [threads(list_to_integer(N))]);
                ["stop_threads"] -> stop_threads(), io:format("stopped~n");
                _ -> io:format("unknown command~n")
            end,
            commands()
    end.

spin_loop() ->
    ok = spin(1),
    spin_loop().

spin(_Ms) -> erlang:nif_error(not_loaded).
threads(_N) -> erlang:nif_error(not_loaded).
stop_threads() -> erlang:nif_error(not_loaded).
