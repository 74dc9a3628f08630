%% Off-heap binaries, for beam-bpf-procs' BINARY column and --binaries against the VM's own
%% process_info(P, binary).
%%
%% main(shared): three processes (a, b, c) share one 32 MiB binary, and one (many) holds 1,000
%% refc binaries of 100 bytes; each ends waiting in a receive, so its lists hold still. Prints
%% `ready a=<pid> b=<pid> c=<pid> many=<pid>`; then each `info` line on stdin prints, for every
%% process, `proc <pid> <reductions>` and then `bin <pid> <address> <bytes> <refc>` for each binary
%% process_info(P, binary) lists (both read in one call), and `bin_end`.
%%
%% main(leak): the classic binary leak. A process registered as bb_leak is sent a 1 MiB binary
%% every 10 ms and keeps a 10-byte sub-binary of each; it never collects (its heap and binary
%% virtual heap are large enough for the whole run, as a router's that handles little else), so
%% every 1 MiB stays referenced from its off-heap list. The feed stops after 600. Prints
%% `ready leak=<pid>`.
-module(bb_binaries).
-export([main/1]).

main(shared) ->
    Self = self(),
    Holder = fun() -> receive {big, Big} -> settled(Self, Big) end end,
    B = spawn(Holder),
    C = spawn(Holder),
    A = spawn(fun() ->
                      Big = binary:copy(<<7>>, 32 bsl 20),
                      B ! {big, Big},
                      C ! {big, Big},
                      settled(Self, Big)
              end),
    Many = spawn(fun() -> settled(Self, [binary:copy(<<I:32>>, 25) || I <- lists:seq(1, 1000)]) end),
    [receive {settled, P} -> ok end || P <- [A, B, C, Many]],
    io:format("ready a=~s b=~s c=~s many=~s~n", [pid_to_list(P) || P <- [A, B, C, Many]]),
    loop();
main(leak) ->
    Leak = spawn_opt(fun() -> leak([]) end, [{min_heap_size, 100000}, {min_bin_vheap_size, 1 bsl 30}]),
    register(bb_leak, Leak),
    spawn(fun() -> feed(Leak, 600) end),
    io:format("ready leak=~s~n", [pid_to_list(Leak)]),
    receive stop -> ok end.

loop() ->
    case io:get_line('') of
        "info" ++ _ ->
            [begin
                 io:format("proc ~s ~p~n", [pid_to_list(P), Reds]),
                 [io:format("bin ~s ~p ~p ~p~n", [pid_to_list(P), Addr, Size, Refc]) || {Addr, Size, Refc} <- Bins]
             end
             || P <- processes(), [{reductions, Reds}, {binary, Bins}] <- [erlang:process_info(P, [reductions, binary])]],
            io:format("bin_end~n"),
            loop();
        _ -> erlang:halt(0)
    end.

%% Collects (the binaries built on the way are garbage on its lists until then), tells the
%% parent, then holds `Term` while waiting.
settled(Parent, Term) ->
    erlang:garbage_collect(),
    Parent ! {settled, self()},
    receive {stop, From} -> From ! Term end.

leak(Kept) ->
    receive {chunk, Bin} -> leak([binary:part(Bin, 0, 10) | Kept]) end.

feed(_, 0) -> ok;
feed(P, N) ->
    P ! {chunk, binary:copy(<<(N rem 256)>>, 1 bsl 20)},
    timer:sleep(10),
    feed(P, N - 1).
