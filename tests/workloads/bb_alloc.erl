%% Allocation workload for beam-bpf-sample -e alloc, with the VM's own accounts of it.
%%
%%   erl -noshell -pa DIR -eval 'bb_alloc:main()'
%%
%% One worker process runs rounds of three functions, each ?ITERS iterations of the same
%% arithmetic (spin/2, allocation-free): alloc_three/2 also builds a 5-tuple per iteration (6
%% words), alloc_one/2 a cons cell (2 words), alloc_none/2 nothing. So by construction they
%% allocate 3:1:0 words while spending about the same CPU time. Prints `ready <worker pid>`
%% once the worker has warmed up and is idle (it then sits in a receive and does not
%% collect), then reads commands from stdin:
%%   go N     the worker runs N rounds; once every trace message of the run has reached the
%%            tracer, prints `gc_words W gcs G`: from the VM's `garbage_collection` trace of
%%            the worker, the words it allocated before each collection, summed (heap_size -
%%            recent_size + mbuf_size of each gc_*_start: the young heap above the high-water
%%            mark, and heap fragments), and the number of collections (calls of the VM's
%%            garbage_collect(): a minor collection falling back to a major one is one).
%%   cpu N    N rounds with the trace off (for a CPU profile of the same work); prints
%%            `cpu_done`.
%%   tprof N  (OTP 27 on) N rounds under tprof's call_memory tracing, in a new process; prints
%%            `tprof M:F/A WORDS` for each function it saw allocate, then `tprof_end`.
%%   time N   (bench/alloc.py) a new, untraced process runs N rounds of gc_heavy/1, which only
%%            builds and drops short lists (a collection every ~230 words), timed inside the VM;
%%            prints `time MICROSECONDS`. `tprof_time N` does the same under tprof's call_memory
%%            tracing. `time_mixed N`: N rounds of the 3:1:0 work above (a collection every ~40
%%            iterations of arithmetic), the same way.
%%   bias N   (bench/alloc.py) the worker runs N rounds of alloc_small/2 (100 cons cells, built
%%            in Erlang code) and alloc_big/1 (one 199-element tuple from erlang:make_tuple/2, a
%%            BIF): 200 words each, 50/50 by construction; prints `bias_done`.
%%   quit     (or end of input) halts the VM.
-module(bb_alloc).
-export([main/0]).
-export([worker/0, tracer/0, rounds/1, gc_heavy/1]).

-define(ITERS, 2000).
-define(SPIN, 200).  % arithmetic enough to outweigh the collections in CPU time

main() ->
    Worker = spawn(?MODULE, worker, []),
    Tracer = spawn(?MODULE, tracer, []),
    1 = erlang:trace(Worker, true, [garbage_collection, {tracer, Tracer}]),
    Worker ! {go, 20, self()},  % warm-up: the first collections size the heap
    receive {Worker, done} -> ok end,
    io:format("ready ~s~n", [pid_to_list(Worker)]),
    command_loop(Worker, Tracer).

command_loop(Worker, Tracer) ->
    case io:get_line('') of
        "go " ++ N ->
            Tracer ! {reset, self()},
            receive {Tracer, reset} -> ok end,
            Worker ! {go, list_to_integer(string:trim(N)), self()},
            receive {Worker, done} -> ok end,
            Ref = erlang:trace_delivered(Worker),
            receive {trace_delivered, Worker, Ref} -> ok end,
            Tracer ! {sum, self()},
            receive {Tracer, {Words, Gcs}} -> io:format("gc_words ~p gcs ~p~n", [Words, Gcs]) end,
            command_loop(Worker, Tracer);
        "cpu " ++ N ->
            %% The same work untraced: the trace messages of its collections would show in a
            %% CPU profile.
            erlang:trace(Worker, false, [garbage_collection]),
            Worker ! {go, list_to_integer(string:trim(N)), self()},
            receive {Worker, done} -> ok end,
            1 = erlang:trace(Worker, true, [garbage_collection, {tracer, Tracer}]),
            io:format("cpu_done~n"),
            command_loop(Worker, Tracer);
        "tprof " ++ N ->
            Rounds = list_to_integer(string:trim(N)),
            {_, {call_memory, Traced}} =
                tprof:profile(fun() -> rounds(Rounds) end, #{type => call_memory, report => return}),
            Words = lists:foldl(fun({M, F, A, PerProc}, Acc) ->
                                        W = lists:sum([Mem || {_, _, Mem} <- PerProc]),
                                        maps:update_with({M, F, A}, fun(X) -> X + W end, W, Acc)
                                end, #{}, Traced),
            [io:format("tprof ~s:~s/~p ~p~n", [M, F, A, W]) || {{M, F, A}, W} <- maps:to_list(Words)],
            io:format("tprof_end~n"),
            command_loop(Worker, Tracer);
        "time " ++ N ->
            io:format("time ~p~n", [timed(fun gc_heavy/1, list_to_integer(string:trim(N)))]),
            command_loop(Worker, Tracer);
        "time_mixed " ++ N ->
            io:format("time ~p~n", [timed(fun rounds/1, list_to_integer(string:trim(N)))]),
            command_loop(Worker, Tracer);
        "tprof_time " ++ N ->
            Rounds = list_to_integer(string:trim(N)),
            T0 = erlang:monotonic_time(microsecond),
            _ = tprof:profile(fun() -> gc_heavy(Rounds) end, #{type => call_memory, report => return}),
            io:format("time ~p~n", [erlang:monotonic_time(microsecond) - T0]),
            command_loop(Worker, Tracer);
        "bias " ++ N ->
            Worker ! {bias, list_to_integer(string:trim(N)), self()},
            receive {Worker, done} -> io:format("bias_done~n") end,
            command_loop(Worker, Tracer);
        "quit" ++ _ -> erlang:halt(0);
        eof -> erlang:halt(0);
        {error, _} -> erlang:halt(0);
        _ -> command_loop(Worker, Tracer)
    end.

%% Microseconds F(Rounds) takes in a new process: not the traced worker, whose trace messages
%% would cost as much as its collections.
timed(F, Rounds) ->
    Self = self(),
    P = spawn(fun() ->
                      T0 = erlang:monotonic_time(microsecond),
                      F(Rounds),
                      Self ! {self(), erlang:monotonic_time(microsecond) - T0}
              end),
    receive {P, Us} -> Us end.

%% worker ------------------------------------------------------------------------------------
worker() ->
    receive
        {go, Rounds, From} ->
            rounds(Rounds),
            From ! {self(), done},
            worker();
        {bias, Rounds, From} ->
            bias(Rounds),
            From ! {self(), done},
            worker()
    end.

gc_heavy(0) -> ok;
gc_heavy(N) ->
    _ = build(100, []),
    gc_heavy(N - 1).

build(0, Acc) -> Acc;
build(N, Acc) -> build(N - 1, [N | Acc]).

bias(0) -> ok;
bias(N) ->
    _ = alloc_small(100, []),
    _ = alloc_big(N),
    bias(N - 1).

alloc_small(0, Acc) -> Acc;
alloc_small(N, Acc) -> alloc_small(N - 1, [N | Acc]).

alloc_big(N) -> erlang:make_tuple(199, N).

rounds(0) -> ok;
rounds(N) ->
    _ = alloc_three(?ITERS, none),
    _ = alloc_one(?ITERS, none),
    _ = alloc_none(?ITERS, 0),
    rounds(N - 1).

alloc_three(0, T) -> T;
alloc_three(N, _) -> alloc_three(N - 1, {N, spin(?SPIN, N), N, N, N}).

alloc_one(0, T) -> T;
alloc_one(N, _) -> alloc_one(N - 1, [spin(?SPIN, N)]).

alloc_none(0, T) -> T;
alloc_none(N, T) -> alloc_none(N - 1, spin(?SPIN, N) + T band 1).

spin(0, A) -> A;
spin(K, A) -> spin(K - 1, (A * 31 + K) band 16#fffff).

%% tracer ------------------------------------------------------------------------------------
%% A minor collection that gives up and falls back to a major one sends gc_minor_start,
%% gc_minor_end (wordsize 0) and gc_major_start from ONE call (see bb_gc.erl): its words are
%% counted once, at the minor start. (With a heap this small and nothing live, every collection
%% of the worker is one of those.)
tracer() -> tracer(0, 0, none).

tracer(Words, Gcs, Prev) ->
    receive
        {trace, _, gc_major_start, _} when Prev =:= {gc_minor_end, 0} ->
            tracer(Words, Gcs, gc_major_start);
        {trace, _, Start, Info} when Start =:= gc_minor_start; Start =:= gc_major_start ->
            Get = fun(K) -> proplists:get_value(K, Info) end,
            tracer(Words + Get(heap_size) - Get(recent_size) + Get(mbuf_size), Gcs + 1, Start);
        {trace, _, gc_minor_end, Info} ->
            tracer(Words, Gcs, {gc_minor_end, proplists:get_value(wordsize, Info)});
        {trace, _, Tag, _} ->
            tracer(Words, Gcs, Tag);
        {reset, From} ->
            From ! {self(), reset},
            tracer(0, 0, none);
        {sum, From} ->
            From ! {self(), {Words, Gcs}},
            tracer(Words, Gcs, Prev)
    end.
