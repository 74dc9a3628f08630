%% A VM whose text is hostile (issue 20), for tests/integration/hostile_text_test.cpp:
%%  - a module compiled at run time whose module, function and file names hold terminal escapes
%%    (ESC [2J clears the screen, ESC ]0;...BEL sets the window title, U+009B is CSI to a UTF-8
%%    terminal), and processes registered under such names running its code (in a loop that
%%    allocates, so it also collects garbage);
%%  - bb_shared_dict, whose dictionary holds 3,000 keys sharing one 100,000-element list.
%% Atoms hold code points, not bytes, on OTP 25 and 27: bytes that are not UTF-8 cannot be
%% put in one from Erlang (only by writing the VM's memory).
%%   erl -noshell -pa DIR -eval 'bb_hostile:main()'
%% prints `ready <spinner pids...> <shared dict pid> <flat size of its list>`, then serves
%% bb_work's commands.
-module(bb_hostile).
-export([main/0, names/0]).

names() ->
    [list_to_atom("bb_clear\e[2J"),
     list_to_atom("bb_title\e]0;pwned" ++ [7]),
     list_to_atom("bb_csi" ++ [16#9b] ++ "2J"),
     list_to_atom("bb_rtl" ++ [16#202e] ++ "txt.exe"),
     list_to_atom("bb_nl\nfake line")].

%% -module(bb_evil). -export(['spin\e]0;pwned<BEL>'/1]).
%% 'spin...'(N) -> _ = lists:duplicate(64, N), 'spin...'((N * 7 + 1) rem 1000003).
evil_module() ->
    M = bb_evil,  % the compiler refuses control characters and non-Latin-1 in module names
    F = list_to_atom("spin\e]0;pwned" ++ [7]),
    N = {var, 4, 'N'},
    Next = {op, 5, 'rem', {op, 5, '+', {op, 5, '*', N, {integer, 5, 7}}, {integer, 5, 1}}, {integer, 5, 1000003}},
    Body = [{match, 4, {var, 4, '_'}, {call, 4, {remote, 4, {atom, 4, lists}, {atom, 4, duplicate}}, [{integer, 4, 64}, N]}},
            {call, 5, {atom, 5, F}, [Next]}],
    Forms = [{attribute, 1, file, {"evil\e[1m\n.erl", 1}},
             {attribute, 1, module, M},
             {attribute, 2, export, [{F, 1}]},
             {function, 3, F, 1, [{clause, 3, [N], [], Body}]},
             {eof, 6}],
    {ok, M, Bin} = compile:forms(Forms, [binary, return_errors]),
    {module, M} = code:load_binary(M, "evil\e[1m.erl", Bin),
    {M, F}.

spinner(Name, {M, F}) ->
    Parent = self(),
    P = spawn(fun() -> register(Name, self()), Parent ! {self(), registered}, M:F(1) end),
    receive {P, registered} -> P end.

shared_dict(List) ->
    Parent = self(),
    P = spawn(fun() ->
                      register(bb_shared_dict, self()),
                      [put({key, K}, List) || K <- lists:seq(1, 3000)],
                      Parent ! {self(), filled},
                      receive never -> ok end
              end),
    receive {P, filled} -> P end.

main() ->
    MF = evil_module(),
    Spinners = [spinner(Name, MF) || Name <- names()],
    List = lists:seq(1, 100000),
    Shared = shared_dict(List),
    bb_work:serve(Spinners ++ [Shared, erts_debug:flat_size(List)]).
