%% GC workload for beam-bpf-blame's exact-count test: the tool's `--count` of
%% erts_garbage_collect* calls is compared with an oracle the VM keeps itself, the
%% `garbage_collection` trace messages (erlang:trace/3) of the same process.
%%
%%   erl -noshell -pa DIR -eval 'bb_gc:main()'        (or bb_gc:main(Iterations))
%%
%% prints `ready <worker pid>` once the worker has warmed up, is idle and is traced, then
%% reads commands from stdin:
%%   go    the worker runs a fixed amount of allocation work (Iterations rounds of building
%%         and dropping a short list), then goes idle again; once every trace message of the
%%         run has reached the tracer, prints
%%           gc_count N minor Mi major Ma minor_then_major A
%%         N = Mi + Ma, the gc_minor_start and gc_major_start messages of that run. A counts
%%         the minor collections that gave up and fell back to a major one: OTP's
%%         garbage_collect() (erl_gc.c) then sends gc_minor_start, gc_minor_end (wordsize 0),
%%         gc_major_start and gc_major_end from ONE call, so N would count that call twice.
%%         A process's first collection is always one (no old heap yet), which is why the
%%         worker warms up (one untraced run) before `ready`; in the steady state nothing is
%%         promoted and A is 0, so N is the number of calls.
%%   quit  (or end of input) halts the VM.
%%
%% The window both sides agree on is the `go` run: before `go` and after the run the worker
%% sits in a receive and does not collect. The work only builds lists in Erlang code, so every
%% collection is the JIT's heap-full call (erts_garbage_collect_nobump), never the collection
%% after a BIF (erts_gc_after_bif_call_lhf, which the tool's erts_garbage_collect prefix does
%% not cover). The live data stays small (one list of ?LIST_LEN cells at most), so the heap
%% stays small and no collection goes to a dirty scheduler.
%%
%% Measured on OTP 25.2 (x86_64): one collection per iteration (a 100-cell list is 200 words,
%% the worker's heap stays at 233 words), so gc_count equals Iterations.
-module(bb_gc).
-export([main/0, main/1]).
%% Entry points of spawned processes.
-export([worker/1, tracer/0]).

-define(DEFAULT_ITERATIONS, 3000).
-define(LIST_LEN, 100).

main() -> main(?DEFAULT_ITERATIONS).

main(Iterations) when is_integer(Iterations), Iterations > 0 ->
    Worker = spawn(?MODULE, worker, [Iterations]),
    %% Warm-up run, untraced: the first collections (old heap allocation, heap sizing) are
    %% out of the way before the window.
    Worker ! {go, self()},
    receive {Worker, done} -> ok end,
    Tracer = spawn(?MODULE, tracer, []),
    1 = erlang:trace(Worker, true, [garbage_collection, {tracer, Tracer}]),
    io:format("ready ~s~n", [pid_to_list(Worker)]),
    command_loop(Worker, Tracer).

command_loop(Worker, Tracer) ->
    case io:get_line('') of
        "go" ++ _ ->
            Tracer ! {reset, self()},
            receive {Tracer, reset} -> ok end,
            Worker ! {go, self()},
            receive {Worker, done} -> ok end,
            %% The reply comes once every trace message the worker generated so far has been
            %% delivered to the tracer; the tracer then drains its mailbox before answering.
            Ref = erlang:trace_delivered(Worker),
            receive {trace_delivered, Worker, Ref} -> ok end,
            Tracer ! {count, self()},
            receive
                {Tracer, {Minor, Major, Fallback}} ->
                    io:format("gc_count ~p minor ~p major ~p minor_then_major ~p~n",
                              [Minor + Major, Minor, Major, Fallback])
            end,
            command_loop(Worker, Tracer);
        "quit" ++ _ -> erlang:halt(0);
        eof -> erlang:halt(0);         % the test that owned our stdin is gone
        {error, _} -> erlang:halt(0);
        _ -> command_loop(Worker, Tracer)
    end.

%% worker ------------------------------------------------------------------------------------
worker(Iterations) ->
    receive
        {go, From} ->
            ok = work(Iterations),
            From ! {self(), done},
            worker(Iterations)
    end.

work(0) -> ok;
work(N) ->
    L = build(?LIST_LEN, []),
    %% Use the list so it is really built; hd/1 is a guard BIF the JIT inlines (no heap use).
    _ = hd(L),
    work(N - 1).

build(0, Acc) -> Acc;
build(N, Acc) -> build(N - 1, [N | Acc]).

%% tracer ------------------------------------------------------------------------------------
%% Counts {Minor, Major, Fallback} starts; Prev is the previous message's tag and reclaimed
%% words, to recognise a gc_major_start right after a gc_minor_end that reclaimed nothing.
tracer() -> tracer({0, 0, 0}, none).

tracer(Counts, Prev) ->
    receive
        {trace, _, _, _} = T ->
            {Counts1, Prev1} = count(T, Counts, Prev),
            tracer(Counts1, Prev1);
        {reset, From} ->
            From ! {self(), reset},
            tracer({0, 0, 0}, none);
        {count, From} ->
            {Counts1, Prev1} = drain(Counts, Prev),
            From ! {self(), Counts1},
            tracer(Counts1, Prev1)
    end.

count({trace, _, gc_minor_start, _}, {Mi, Ma, F}, _) ->
    {{Mi + 1, Ma, F}, gc_minor_start};
count({trace, _, gc_major_start, _}, {Mi, Ma, F}, {gc_minor_end, 0}) ->
    {{Mi, Ma + 1, F + 1}, gc_major_start};
count({trace, _, gc_major_start, _}, {Mi, Ma, F}, _) ->
    {{Mi, Ma + 1, F}, gc_major_start};
count({trace, _, gc_minor_end, Info}, Counts, _) ->
    {Counts, {gc_minor_end, proplists:get_value(wordsize, Info)}};
count({trace, _, Tag, _}, Counts, _) ->     % gc_major_end, gc_max_heap_size
    {Counts, Tag}.

%% Trace messages still in the mailbox (none are expected after trace_delivered, but a
%% count that left one behind would be wrong).
drain(Counts, Prev) ->
    receive
        {trace, _, _, _} = T ->
            {Counts1, Prev1} = count(T, Counts, Prev),
            drain(Counts1, Prev1)
    after 0 -> {Counts, Prev}
    end.
