%% Workloads for the chaos tests (tests/integration/chaos_test.cpp). Same protocol as bb_work:
%%   erl -noshell -pa DIR -eval 'bb_chaos:main(Name, Arg)'
%% prints one `ready ...` line once its shape is in place, then reads commands from stdin:
%% `quit` (or end of input) halts the VM.
%%
%% Kept apart from bb_work.erl so its shapes stay untouched; the busy functions here have
%% their own names (spin_x, spin_y), so a profile of this VM cannot be mistaken for bb_work's.
-module(bb_chaos).
-export([main/1, main/2]).
%% Entry points of spawned processes: exported so spawn/3 starts them with no wrapper frame.
-export([idler/0, caller_x/1, caller_y/1]).

%% As in bb_work: the endless loops stop when their counter equals `Never` (-1, never reached),
%% which comes from spawn's arguments, so the compiler cannot prove they never return and
%% keeps caller_x -> spin_x a real (non-tail) call that leaves caller_x's frame on the stack.
-define(NEVER, -1).

main(Name) -> main(Name, undefined).

main(Name, Arg) -> bb_work:serve(start(Name, Arg)).

%% --- many -------------------------------------------------------------------------------
%% N idle processes, each blocked in `receive` (never hibernated: each keeps its own heap and
%% stack, as in a VM with many connections), then two busy ones: caller_x/1 -> spin_x/2 and
%% caller_y/1 -> spin_y/2. The VM needs +P above N. Prints
%% `ready <x pid> <y pid> <process count>`, the count taken after every idler is spawned and
%% has reached its receive.
start(many, N) when is_integer(N), N > 0 ->
    Idlers = [spawn(?MODULE, idler, []) || _ <- lists:seq(1, N)],
    %% Every idler is waiting once it is in `waiting` state: check the last one spawned
    %% (processes start in order on this scheduler's run queue, but ask rather than assume).
    wait_waiting(lists:last(Idlers)),
    put(bb_chaos_idlers, Idlers),  % kept referenced; nothing ever sends to them
    X = spawn(?MODULE, caller_x, [?NEVER]),
    Y = spawn(?MODULE, caller_y, [?NEVER]),
    [X, Y, erlang:system_info(process_count)].

wait_waiting(Pid) ->
    case erlang:process_info(Pid, status) of
        {status, waiting} -> ok;
        _ -> timer:sleep(10), wait_waiting(Pid)
    end.

idler() ->
    receive
        stop -> ok
    end.

%% many: the two busy processes -------------------------------------------------------------
caller_x(Never) ->
    R = spin_x(0, Never),
    exit({returned, R}).

caller_y(Never) ->
    R = spin_y(0, Never),
    exit({returned, R}).

spin_x(Never, Never) -> 0;
spin_x(Acc, Never) -> spin_x((Acc + 7) band 16#ffffff, Never).

spin_y(Never, Never) -> 0;
spin_y(Acc, Never) -> spin_y((Acc + 11) band 16#ffffff, Never).
