%% The memory-corrupting fixture (tests/integration/hostile_mem_test.cpp): a VM whose own NIF
%% (tests/fixtures/hostile_mem_nif.c) writes lies into its memory for the profiler to read.
%%   main(LibPath)  loads LibPath ++ ".so", starts the victims and prints
%%                  "ready OSPID SPINNER SELF_CONS HUGE_TUPLE IDLE1 ... IDLE5", then reads commands:
%%     poke ADDR WORD     one word of this VM's memory (the test names a victim's Process field)
%%     filled WORD        prints "filled ADDR": 4 KiB holding WORD in every word
%%     self_block LOW     prints "self_block ADDR": 4 KiB at ADDR (LOW modulo 64) holding ADDR in
%%                        every word
%%     exec_ranges N      N separate executable mappings; prints "exec_ranges MADE"
%%     churn WIDTH LIFE MS  threads started and ended for MS ms, WIDTH at a time, each
%%                        living LIFE ms; prints "churning", then "churned STARTED" when done
%% The victims wait in a receive no message ends, so the VM never runs or collects them:
%%   SELF_CONS   holds a list whose first cell is its own tail
%%   HUGE_TUPLE  holds a tuple whose header claims 2^40 elements
%%   IDLE1..5    hold nothing; the test corrupts their Process structs
%%   SPINNER     runs arithmetic forever (it is sampled); the test points its registered name at
%%               an atom past the atom table
-module(bb_hostile_mem).
-export([main/1, self_tail/1, huge_arity/2, filled/1, self_block/1, peek/1, poke/2, exec_ranges/1, churn/3]).

main(Lib) ->
    ok = erlang:load_nif(Lib, 0),
    Spinner = spawn(fun() -> spin(0) end),
    SelfCons = spawn(fun() ->
                             L = lists:seq(1, 10),
                             ok = self_tail(L),
                             hold(L)
                     end),
    HugeTuple = spawn(fun() ->
                              T = list_to_tuple(lists:seq(1, 5)),
                              ok = huge_arity(T, 1 bsl 40),
                              hold(T)
                      end),
    Idle = [spawn(fun() -> hold(none) end) || _ <- [1, 2, 3, 4, 5]],
    timer:sleep(100),  % every victim in its receive
    io:format("ready ~s~s~n", [os:getpid(), [[" ", pid_to_list(P)] || P <- [Spinner, SelfCons, HugeTuple | Idle]]]),
    commands().

hold(Term) ->
    receive
        {never, Ref} -> {Ref, Term}
    end.

spin(N) -> spin((N * 7 + 3) rem 1000003).

commands() ->
    case io:get_line("") of
        eof -> halt(0);
        Line ->
            case string:lexemes(string:trim(Line), " ") of
                ["poke", A, W] -> ok = poke(list_to_integer(A), list_to_integer(W)), io:format("poked~n");
                ["filled", W] -> io:format("filled ~p~n", [filled(list_to_integer(W))]);
                ["self_block", Low] -> io:format("self_block ~p~n", [self_block(list_to_integer(Low))]);
                ["exec_ranges", N] -> io:format("exec_ranges ~p~n", [exec_ranges(list_to_integer(N))]);
                ["churn", W, Life, Ms] ->
                    Self = self(),
                    [Wi, Li, Mi] = [list_to_integer(X) || X <- [W, Life, Ms]],
                    spawn(fun() -> Self ! {churned, churn(Wi, Li, Mi)} end),
                    io:format("churning~n"),
                    receive {churned, S} -> io:format("churned ~p~n", [S]) end;
                _ -> io:format("unknown command~n")
            end,
            commands()
    end.

self_tail(_L) -> erlang:nif_error(not_loaded).
huge_arity(_T, _A) -> erlang:nif_error(not_loaded).
filled(_W) -> erlang:nif_error(not_loaded).
self_block(_Low) -> erlang:nif_error(not_loaded).
peek(_A) -> erlang:nif_error(not_loaded).
poke(_A, _W) -> erlang:nif_error(not_loaded).
exec_ranges(_N) -> erlang:nif_error(not_loaded).
churn(_W, _L, _Ms) -> erlang:nif_error(not_loaded).
