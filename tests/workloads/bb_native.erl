%% Workloads for the mixed-stack tests (tests/integration/native_test.cpp): Erlang code whose
%% time goes to native code, with a caller chain known by construction. Run as
%%   erl -noshell -pa DIR -eval 'bb_native:main(Name)'
%% and driven like bb_work (prints `ready <pid>`, halts on `quit` or end of input).
%%   zlib  a process compressing a 240 KB binary with zlib:compress/1 in a loop: OTP's own zlib
%%         NIFs (in beam.smp) calling the system's libz
%%   gc    a process building and dropping 100-cell lists: its time goes to the collector,
%%         entered from the JIT's heap test in build/1
%%   late_crypto  (OTP builds with crypto) a process that waits for the `go` command, then
%%         hashes 1 MiB with crypto:hash/2 in a loop: the crypto module's on_load then dlopen()s
%%         the crypto NIF library and libcrypto, which a profiler attached before has not seen
%%         mapped
%%   blame a process alternating encode/1 (term_to_binary/1) and decode/1 (binary_to_term/1)
%%         of the same 20,000-element list: both BIFs start at the same depth of the
%%         scheduler's C stack, so decode's frames lie where encode's were and may hold stale
%%         return addresses into term_to_binary_1. A sample counted for term_to_binary_1 while
%%         decode/1 is on the Erlang stack is a false attribution.
-module(bb_native).
-export([main/1]).
%% Entry points of spawned processes: exported so spawn/3 starts them with no wrapper frame.
-export([zip_root/1, gc_root/1, blame_root/1, crypto_root/1]).

%% The loops stop when their counter equals `Never` (-1, from spawn's arguments), which it
%% never does: with a literal the compiler would see they never return and make the calls
%% above them tail calls, removing the frames the tests look for.
main(zlib) -> bb_work:serve([spawn(?MODULE, zip_root, [-1])]);
main(gc) -> bb_work:serve([spawn(?MODULE, gc_root, [-1])]);
main(blame) -> bb_work:serve([spawn(?MODULE, blame_root, [-1])]);
main(late_crypto) -> bb_work:serve([spawn(?MODULE, crypto_root, [-1])]).

zip_root(Never) ->
    Data = list_to_binary([integer_to_list(X * X rem 9973) || X <- lists:seq(1, 60000)]),
    zip_loop(Data, 0, Never),
    ok.

zip_loop(_, Never, Never) -> done;
zip_loop(Data, N, Never) ->
    _ = zlib:compress(Data),
    zip_loop(Data, N + 1, Never).

%% Each caller returns something its callee does not: were it the callee's (known) result, the
%% compiler would make the call a tail call.
gc_root(Never) ->
    ok = gc_mid(Never),
    stopped.

gc_mid(Never) ->
    gc_loop(0, Never),
    ok.

gc_loop(Never, Never) -> done;
gc_loop(N, Never) ->
    _ = build(100),
    gc_loop(N + 1, Never).

build(0) -> [];
build(K) -> [K | build(K - 1)].

blame_root(Never) ->
    Term = [{N, integer_to_list(N), [N, N + 1]} || N <- lists:seq(1, 20000)],
    blame_loop(Term, term_to_binary(Term), 0, Never),
    stopped.

blame_loop(_, _, Never, Never) -> done;
blame_loop(Term, Bin, N, Never) ->
    ok = encode(Term),
    ok = decode(Bin),
    blame_loop(Term, Bin, N + 1, Never).

%% The result is used: the compiler drops a pure BIF whose result is not.
encode(T) ->
    true = byte_size(term_to_binary(T)) > 0,
    ok.

decode(B) ->
    _ = binary_to_term(B),
    ok.

crypto_root(Never) ->
    receive go -> ok end,
    Data = binary:copy(<<"0123456789abcdef">>, 65536),
    crypto_loop(Data, 0, Never),
    stopped.

crypto_loop(_, Never, Never) -> done;
crypto_loop(Data, N, Never) ->
    true = byte_size(crypto:hash(sha256, Data)) > 0,
    crypto_loop(Data, N + 1, Never).
