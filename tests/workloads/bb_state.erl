%% The workload for beam-bpf-procs --inspect: a gen_server, registered as bb_state, whose state
%% holds a known map, list and binary, and a dictionary entry; and a plain process, bb_mailbox,
%% with three messages it never receives. Both wait in a receive. And bb_growing, whose queue
%% grows by a message every 5 ms (for --watch).
%%   erl -noshell -pa DIR -eval 'bb_state:main()'
%% prints one `expect <what> <flat size in words> <term as ~p prints it>` line per value the tool
%% must find (the state, the dictionary value, each message, then a hash map and a fun held in
%% the dictionary, whose sizes only are compared, and an OTP 29 native record held in the
%% dictionary (the atom none before 29); from the VM's own
%% erts_debug:flat_size/1 and io_lib:format/2), then `waits_in M:F/A` (the server's current function,
%% from process_info), then `ready <state pid> <mailbox pid>`, then serves
%% bb_work's commands (`quit`, or end of input, halts).
-module(bb_state).
-behaviour(gen_server).
-export([main/0, init/1, handle_call/3, handle_cast/2, mailbox/0, growing/0, feed/0]).

state() ->
    Map = #{alpha => 1, beta => [1, 2, 3], gamma => <<"text">>, delta => 3.14,
            eps => 12345678901234567890123, zeta => {nested, [a, b | c]}},
    List = lists:seq(1, 100),
    Refc = binary:copy(<<"abcdefgh">>, 128),  % 1 KiB: off the heap
    Sub = binary:part(Refc, 8, 16),
    {bb_state, Map, List, Refc, Sub, -(1 bsl 70), "a string", self()}.

init([]) ->
    put(bb_key, {value, [1.5, 2.5], <<"dict">>}),
    put(bb_big_map, big_map()),  % a hash map (over 32 keys)
    S = state(),
    put(bb_fun, closure(S)),
    put(bb_record, native_record()),
    {ok, S}.

big_map() -> maps:from_list([{I, {I}} || I <- lists:seq(1, 40)]).

closure(S) -> fun(X) -> {X, element(3, S)} end.

%% An OTP 29 native record (EEP 79), made with records:create/4 rather than record syntax so
%% that this module compiles on 25 and 27 too, where it is the atom none.
native_record() ->
    case code:ensure_loaded(records) of
        {module, records} ->
            records:create(bb_state, point, [{y, 2}, {x, [1, 2]}, {label, <<"p">>}], #{is_exported => true});
        _ -> none
    end.

handle_call(state, _From, S) -> {reply, S, S};
handle_call({dict, Key}, _From, S) -> {reply, get(Key), S}.

handle_cast(_, S) -> {noreply, S}.

mailbox() ->
    register(bb_mailbox, self()),
    receive never -> ok end.

growing() ->
    register(bb_growing, self()),
    receive never -> ok end.

feed() ->
    timer:sleep(5),
    bb_growing ! {more, erlang:monotonic_time()},
    feed().

main() ->
    {ok, Pid} = gen_server:start({local, bb_state}, ?MODULE, [], []),
    Box = spawn(?MODULE, mailbox, []),
    Msgs = [{msg, 1, <<"one">>}, #{two => 2}, [3, 3, 3]],
    [Box ! M || M <- Msgs],
    spawn(?MODULE, growing, []),
    timer:sleep(100),  % every process in its receive
    spawn(?MODULE, feed, []),
    [expect(What, T) || {What, T} <- [{state, gen_server:call(bb_state, state)},
                                      {dict, gen_server:call(bb_state, {dict, bb_key})} |
                                      [{message, M} || M <- Msgs]] ++
                                     [{K, gen_server:call(bb_state, {dict, K})} || K <- [bb_big_map, bb_fun, bb_record]]],
    % Where the server waits, as the VM says (gen_server's loop has another arity in 29).
    timer:sleep(50),
    {current_function, {M, F, A}} = erlang:process_info(Pid, current_function),
    io:format("waits_in ~s:~s/~p~n", [M, F, A]),
    bb_work:serve([Pid, Box]).

expect(What, Term) ->
    Text = re:replace(io_lib:format("~9999p", [Term]), "\n\\s*", "", [global, {return, list}]),
    io:format("expect ~p ~p ~s~n", [What, erts_debug:flat_size(Term), Text]).
