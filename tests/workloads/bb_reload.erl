%% Hot code reloading under the profiler, for beam-bpf's integration tests (reload_test.cpp).
%% Runs as
%%   erl -noshell -pa DIR -eval 'bb_reload:main()'
%%
%% Two versions of one module, bb_reloaded, are compiled in memory from source text (no file
%% is written, so nothing can reload it behind our back). They have different function names:
%%   alpha: run/1 -> alpha_outer/1 -> alpha_inner/2 (a busy loop), and alpha_pad/2
%%   beta:  run/1 -> beta_outer/1  -> beta_inner/2  (the same loop), and beta_pad/2
%% Both calls in each chain are non-tail calls, so a sample in the loop shows
%% run;X_outer;X_inner. The pad functions are large and never called: alpha puts its pad last,
%% beta puts it first, so the two versions have about the same size (each fits where the other
%% was freed) but different layouts: where one version has its chain, the other has its pad.
%% A profiler naming code from the version that is no longer (or not yet) at an address then
%% shows a pad function, or the chain in the wrong order, or an alpha frame under a beta one.
%%
%% One worker loops on bb_reloaded:run(N) (an external call, so each iteration runs the
%% version current at that moment; one call takes about 2 ms). One, not two: loading and
%% purging need every scheduler to pass a code barrier and the code server to run, and with
%% two busy workers on a 2-CPU machine a load took 50 to 150 ms instead of about 1 ms (the
%% loader then managed some 20 loads a second, not 100); the test also runs the VM with +S 1.
%% A loader loads a new version every 10 ms (100 a second), in the order alpha, beta, beta,
%% alpha, alpha, beta, beta, ...: before each load it purges the old version (code:soft_purge,
%% retried until the worker has left it, within one run/1 call), so the JIT frees its memory
%% and the next load takes it. The two versions take turns at two addresses (seen in the
%% +JPperf map output): with the pairs, each address holds alpha, then beta, then alpha, ...
%%
%% Prints `ready <worker pid>`, then reads commands from stdin:
%%   `stats`  prints `stats loads=L alpha=A beta=B retries=R ms=T` (loads done since start,
%%            of each version, soft purges that found a worker still in the old code and were
%%            retried, and erlang:monotonic_time in ms)
%%   `quit` (or end of input) halts the VM.
-module(bb_reload).
-export([main/0, worker/1]).

-define(PERIOD_MS, 10).
-define(RUN_NS, 2000000).
-define(PAD_CLAUSES, 150).

main() ->
    Bins = {compile_version(alpha), compile_version(beta)},
    {module, bb_reloaded} = code:load_binary(bb_reloaded, "bb_reloaded_alpha", element(1, Bins)),
    N = calibrate(),
    Worker = spawn(?MODULE, worker, [N]),
    Parent = self(),
    Loader = spawn(fun() -> loader(Parent, Bins) end),
    receive {Loader, started} -> ok end,
    io:format("ready ~s~n", [pid_to_list(Worker)]),
    command_loop(Loader).

command_loop(Loader) ->
    case io:get_line('') of
        "stats" ++ _ ->
            Loader ! {self(), stats},
            receive {Loader, {Loads, Alpha, Beta, Retries}} ->
                    io:format("stats loads=~p alpha=~p beta=~p retries=~p ms=~p~n",
                              [Loads, Alpha, Beta, Retries, erlang:monotonic_time(millisecond)])
            end,
            command_loop(Loader);
        "quit" ++ _ -> erlang:halt(0);
        eof -> erlang:halt(0);         % the test that owned our stdin is gone
        {error, _} -> erlang:halt(0);
        _ -> command_loop(Loader)
    end.

%% --- the worker ------------------------------------------------------------------------
%% The call is not a tail call (the loop goes on after it), so worker/1 stays under run/1.
worker(N) ->
    _ = bb_reloaded:run(N),
    worker(N).

%% Iterations of X_inner for one run/1 call of about RUN_NS (median of a few timed calls).
calibrate() ->
    Probe = 200000,
    Times = lists:sort([timed(Probe) || _ <- lists:seq(1, 21)]),
    max(1000, round(?RUN_NS * Probe / max(1, lists:nth(11, Times)))).

timed(N) ->
    T0 = erlang:monotonic_time(nanosecond),
    _ = bb_reloaded:run(N),
    erlang:monotonic_time(nanosecond) - T0.

%% --- the loader ------------------------------------------------------------------------
%% Loads on a fixed schedule (every PERIOD_MS from its start, catching up if late), so its
%% rate does not drift with the time purges and loads take.
loader(Parent, Bins) ->
    Parent ! {self(), started},
    loader(Bins, 1, erlang:monotonic_time(millisecond), {1, 1, 0, 0}).

loader(Bins, K, Next, Stats) ->
    Stats1 = answer_stats(Stats, max(0, Next - erlang:monotonic_time(millisecond))),
    Retries = soft_purge(0),
    %% alpha (the initial load, K = 0), then beta, beta, alpha, alpha, beta, beta, ...
    {Version, Bin} = case (K + 1) div 2 rem 2 of
                         0 -> {alpha, element(1, Bins)};
                         1 -> {beta, element(2, Bins)}
                     end,
    {module, bb_reloaded} = code:load_binary(bb_reloaded, "bb_reloaded_" ++ atom_to_list(Version), Bin),
    {Loads, Alpha, Beta, R} = Stats1,
    Stats2 = case Version of
                 alpha -> {Loads + 1, Alpha + 1, Beta, R + Retries};
                 beta -> {Loads + 1, Alpha, Beta + 1, R + Retries}
             end,
    loader(Bins, K + 1, Next + period_ms(), Stats2).

%% BB_RELOAD_PERIOD_MS overrides the period (bench/soak.py loads once a second for an hour).
period_ms() ->
    case os:getenv("BB_RELOAD_PERIOD_MS") of
        false -> ?PERIOD_MS;
        Ms -> list_to_integer(Ms)
    end.

%% Waits up to Ms for a stats request (answering it does not delay the schedule by more than
%% the request itself).
answer_stats(Stats, Ms) ->
    Deadline = erlang:monotonic_time(millisecond) + Ms,
    receive
        {From, stats} ->
            From ! {self(), Stats},
            answer_stats(Stats, max(0, Deadline - erlang:monotonic_time(millisecond)))
    after Ms -> Stats
    end.

%% soft_purge refuses while a worker still runs the old version (it is inside run/1 for about
%% 2 ms after the load): try again shortly. code:purge would kill the worker instead.
soft_purge(Retries) ->
    case code:soft_purge(bb_reloaded) of
        true -> Retries;
        false ->
            timer:sleep(1),
            soft_purge(Retries + 1)
    end.

%% --- the two versions ------------------------------------------------------------------
compile_version(Tag) ->
    {ok, bb_reloaded, Bin} = compile:forms(forms(source(Tag)), [binary, return_errors]),
    Bin.

source(Tag) ->
    T = atom_to_list(Tag),
    Run = "run(N) ->\n    R = " ++ T ++ "_outer(N),\n    R + 1.\n",
    Outer = T ++ "_outer(N) ->\n    R = " ++ T ++ "_inner(N, 0),\n    R band 16#ffff.\n",
    Inner = T ++ "_inner(0, Acc) -> Acc;\n" ++
            T ++ "_inner(N, Acc) -> " ++ T ++ "_inner(N - 1, Acc bxor N).\n",
    Body = case Tag of
               alpha -> [Run, Outer, Inner, pad(T)];
               beta -> [Run, pad(T), Outer, Inner]
           end,
    %% The pad is exported: an unused local function would only draw a warning, but exported
    %% it is certain to stay in the code.
    lists:flatten(["-module(bb_reloaded).\n-export([run/1, ", T, "_pad/2]).\n" | Body]).

%% PAD_CLAUSES clauses of integer arithmetic: a few kB of JIT code that never runs.
pad(T) ->
    Clauses = [io_lib:format("~s_pad(~p, X) -> (X bxor ~p) + (X bsr ~p)", [T, I, I * 7919, I rem 13])
               || I <- lists:seq(1, ?PAD_CLAUSES)],
    [lists:join(";\n", Clauses ++ [T ++ "_pad(_, X) -> X"]), ".\n"].

%% Source text to abstract forms, one form per `.`-terminated token run.
forms(Text) ->
    {ok, Tokens, _} = erl_scan:string(Text),
    [begin {ok, F} = erl_parse:parse_form(Ts), F end || Ts <- split_forms(Tokens, [], [])].

split_forms([], [], Acc) -> lists:reverse(Acc);
split_forms([{dot, _} = Dot | Rest], Cur, Acc) -> split_forms(Rest, [], [lists:reverse([Dot | Cur]) | Acc]);
split_forms([T | Rest], Cur, Acc) -> split_forms(Rest, [T | Cur], Acc).
