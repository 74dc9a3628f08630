%% Modules loaded and purged on command, for beam-bpf-perfmap's integration test
%% (perfmap_test.cpp). Runs as
%%   erl -noshell -pa DIR +JPperf map -eval 'bb_perfmap:main()'
%% Prints `ready`, then reads commands from stdin:
%%   `load N`   compiles bb_pm_N (three small functions) from source in memory and loads it;
%%              prints `loaded bb_pm_N`
%%   `purge N`  deletes and purges bb_pm_N; prints `purged bb_pm_N`
%%   `quit` (or end of input) halts the VM.
-module(bb_perfmap).
-export([main/0]).

main() ->
    io:format("ready~n"),
    loop().

loop() ->
    case string:lexemes(string:trim(io:get_line("")), " ") of
        ["load", N] ->
            M = module(N),
            {ok, M, Bin} = compile:forms(forms(M), [binary]),
            {module, M} = code:load_binary(M, atom_to_list(M) ++ ".erl", Bin),
            io:format("loaded ~s~n", [M]),
            loop();
        ["purge", N] ->
            M = module(N),
            true = code:delete(M),
            code:purge(M),
            io:format("purged ~s~n", [M]),
            loop();
        _ -> halt(0)
    end.

module(N) -> list_to_atom("bb_pm_" ++ N).

forms(M) ->
    Text = ["-module(", atom_to_list(M), ").\n",
            "-export([sum/1, twice/1, name/0]).\n",
            "sum(L) -> lists:foldl(fun(X, A) -> X + A end, 0, L).\n",
            "twice(X) -> {X, X}.\n",
            "name() -> ", atom_to_list(M), ".\n"],
    {ok, Tokens, _} = erl_scan:string(lists:flatten(Text)),
    split(Tokens, [], []).

split([], [], Forms) -> lists:reverse(Forms);
split([{dot, _} = Dot | Rest], Acc, Forms) ->
    {ok, Form} = erl_parse:parse_form(lists:reverse([Dot | Acc])),
    split(Rest, [], [Form | Forms]);
split([T | Rest], Acc, Forms) -> split(Rest, [T | Acc], Forms).
