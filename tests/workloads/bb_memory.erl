%% Processes whose memory lies mostly outside their heaps, for beam-bpf-procs' memory figure
%% against process_info(P, memory): queued messages (on the heap's side, off the heap, large),
%% refc binaries, heap fragments, a big dictionary, an ETS owner. Each ends waiting in a receive
%% that never matches, so its memory holds still while it is read from outside.
%%
%% Prints `ready <name>=<pid> ...`; then each `info` line on stdin prints `mem <name> <bytes>`
%% per process (process_info(P, memory)) and `mem_end`.
-module(bb_memory).
-export([main/0, hold/1]).

main() ->
    Procs = [{Name, start(Name)} || Name <- [queue, offheap_queue, big_messages, binaries, fragments,
                                             dictionary, ets_owner]],
    timer:sleep(200),  % each reaches its receive and handles what it was sent
    io:format("ready~s~n", [[io_lib:format(" ~s=~s", [N, pid_to_list(P)]) || {N, P} <- Procs]]),
    loop(Procs).

loop(Procs) ->
    case io:get_line('') of
        "info" ++ _ ->
            [io:format("mem ~s ~p~n", [N, element(2, erlang:process_info(P, memory))]) || {N, P} <- Procs],
            io:format("mem_end~n"),
            loop(Procs);
        _ -> erlang:halt(0)
    end.

%% 5,000 small messages, queued while the process waits.
start(queue) ->
    P = spawn(?MODULE, hold, [none]),
    [P ! {msg, I} || I <- lists:seq(1, 5000)],
    P;
%% The same with message_queue_data off_heap: every message in its own heap fragment.
start(offheap_queue) ->
    P = spawn_opt(?MODULE, hold, [none], [{message_queue_data, off_heap}]),
    [P ! {msg, I, lists:seq(1, 20)} || I <- lists:seq(1, 5000)],
    P;
%% 200 messages of 1,000-element lists each (about 3 MiB).
start(big_messages) ->
    P = spawn(?MODULE, hold, [none]),
    [P ! {big, lists:seq(I, I + 999)} || I <- lists:seq(1, 200)],
    P;
%% Eight 1 MiB refc binaries and 100 sub-binaries of them: off-heap, and not counted by the VM
%% in memory (only their ProcBins on the heap are).
start(binaries) ->
    Bins = [binary:copy(<<I>>, 1 bsl 20) || I <- lists:seq(1, 8)],
    spawn(?MODULE, hold, [{Bins, [binary:part(B, 10, 100) || B <- Bins, _ <- lists:seq(1, 12)]}]);
%% Received off-heap messages whose data stays in heap fragments (mbuf) until the next GC.
start(fragments) ->
    P = spawn_opt(fun() -> receive go -> ok end, fragments([])  end, [{message_queue_data, off_heap}]),
    [P ! {frag, lists:seq(I, I + 3000)} || I <- lists:seq(1, 3)],
    P ! go,
    P;
%% 2,000 dictionary entries: the dictionary's array is counted.
start(dictionary) ->
    spawn(fun() -> [put({key, I}, I) || I <- lists:seq(1, 2000)], hold(none) end);
%% An ETS table's owner: the VM keeps its tables in the process's ErtsPSD.
start(ets_owner) ->
    spawn(fun() -> ets:new(bb_memory_table, [set, private]), hold(none) end).

fragments(Got) when length(Got) =:= 3 -> hold(Got);
fragments(Got) -> receive {frag, L} -> fragments([L | Got]) end.

hold(Term) ->
    receive {stop, From} -> From ! Term end.
