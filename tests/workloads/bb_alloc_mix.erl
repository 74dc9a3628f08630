%% Allocation workloads whose truth is known from their construction, for beam-bpf-sample -e alloc
%% on periodic code (tests/integration/alloc_test.cpp, bench/alloc.py).
%%
%%   erl -noshell -pa DIR -eval 'bb_alloc_mix:main()'
%%
%% Prints `ready`, then reads commands from stdin. Each workload runs in a new process,
%% registered under a name that tells it apart, which waits for `go`:
%%   mix T G D       spawns `mix_T_G_D`, which repeats take(T) (a list of T cells: 2T words),
%%                   give(G) (2G words) and idle (arithmetic only, about as long as take(300)),
%%                   each called D frames deep. The truth: take T/(T+G) of the words, give
%%                   G/(T+G), idle none, whatever the phase at which the heap fills.
%%   rand SEED       spawns `rand_SEED`, which repeats r1..r6, each building a list of N_i cells
%%                   (N_i drawn from SEED, 20 to 2,000); prints `rand_truth r1 N_1 ... r6 N_6`.
%%   Both print `spawned NAME`.
%%   go MS           the last one spawned runs for MS milliseconds; prints `done ROUNDS`.
%%   pair MS         two processes for MS milliseconds side by side, whose collections come at
%%                   very different rates: `short_epochs` (the default heap: a collection every
%%                   few microseconds of its work) repeats short_take/2, 300 cells; `long_epochs`
%%                   (a young heap of 150,000 words, filled slowly: a collection every few
%%                   milliseconds) repeats long_take/2 (300 cells), long_give/2 (100 cells) and
%%                   arithmetic. Prints `pair_words SHORT LONG_TAKE LONG_GIVE SHORT_PID LONG_PID`,
%%                   the words each function allocated, counted as they are built. Its collections run on a
%%                   dirty scheduler (heaps of 128 Ki words and up).
%%   spawners MS     for MS milliseconds, a spawner starting one process after another (each
%%                   builds a list of 1,000 cells in short_lived/2 and ends: thousands a second,
%%                   each living tens of microseconds), beside one long process repeating
%%                   steady/2 (300 cells) and arithmetic. Prints `spawners_words SHORT STEADY
%%                   SPAWNED`: the words each function built, and the processes spawned.
%%   quit
-module(bb_alloc_mix).
-export([main/0]).

-define(SPIN, 600).

main() ->
    io:format("ready~n"),
    loop(none).

loop(Worker) ->
    case string:lexemes(string:trim(io:get_line('')), " ") of
        ["mix", T, G, D] ->
            Name = lists:flatten(io_lib:format("mix_~s_~s_~s", [T, G, D])),
            loop(spawn_worker(Name, fun(Until) -> mix(int(T), int(G), int(D), Until, 0) end));
        ["rand", Seed] ->
            rand:seed(exsss, int(Seed)),
            Ns = [20 + rand:uniform(1981) || _ <- lists:seq(1, 6)],
            io:format("rand_truth~s~n", [[io_lib:format(" r~p ~p", [I, N]) || {I, N} <- lists:zip(lists:seq(1, 6), Ns)]]),
            loop(spawn_worker("rand_" ++ Seed, fun(Until) -> rand_rounds(list_to_tuple(Ns), Until, 0) end));
        ["pair", Ms] ->
            pair(int(Ms)),
            loop(Worker);
        ["spawners", Ms] ->
            spawners(int(Ms)),
            loop(Worker);
        ["go", Ms] when is_pid(Worker) ->
            Worker ! {go, int(Ms), self()},
            receive {Worker, Rounds} -> io:format("done ~p~n", [Rounds]) end,
            loop(none);
        _ -> erlang:halt(0)
    end.

int(S) -> list_to_integer(S).

%% F(Until) in a new process registered as Name, once told to go, until the monotonic time
%% Until (ms).
spawn_worker(Name, F) ->
    Self = self(),
    Pid = spawn(fun() ->
                        register(list_to_atom(Name), self()),
                        Self ! {self(), registered},
                        receive
                            {go, Ms, From} ->
                                Until = erlang:monotonic_time(millisecond) + Ms,
                                From ! {self(), F(Until)}
                        end
                end),
    receive {Pid, registered} -> ok end,
    io:format("spawned ~s~n", [Name]),
    Pid.

%% The clock is read once per 64 rounds: erlang:monotonic_time/1 allocates nothing on the heap
%% (a small integer), and the counter neither.
mix(T, G, D, Until, N) ->
    _ = deep(D, take, T),
    _ = deep(D, give, G),
    _ = deep(D, idle, ?SPIN),
    case N band 63 =:= 63 andalso erlang:monotonic_time(millisecond) >= Until of
        true -> N + 1;
        false -> mix(T, G, D, Until, N + 1)
    end.

%% D frames of its own below the work: the heap then fills at other stack depths.
deep(0, take, N) -> take(N, []);
deep(0, give, N) -> give(N, []);
deep(0, idle, N) -> idle(N, 0);
deep(D, What, N) -> _ = deep(D - 1, What, N), ok.

take(0, Acc) -> Acc;
take(N, Acc) -> take(N - 1, [N | Acc]).

give(0, Acc) -> Acc;
give(N, Acc) -> give(N - 1, [N | Acc]).

idle(0, A) -> A;
idle(K, A) -> idle(K - 1, (A * 31 + K) band 16#fffff).

rand_rounds({N1, N2, N3, N4, N5, N6} = Ns, Until, N) ->
    _ = r1(N1, []), _ = r2(N2, []), _ = r3(N3, []),
    _ = r4(N4, []), _ = r5(N5, []), _ = r6(N6, []),
    case N band 63 =:= 63 andalso erlang:monotonic_time(millisecond) >= Until of
        true -> N + 1;
        false -> rand_rounds(Ns, Until, N + 1)
    end.

r1(0, A) -> A; r1(N, A) -> r1(N - 1, [N | A]).
r2(0, A) -> A; r2(N, A) -> r2(N - 1, [N | A]).
r3(0, A) -> A; r3(N, A) -> r3(N - 1, [N | A]).
r4(0, A) -> A; r4(N, A) -> r4(N - 1, [N | A]).
r5(0, A) -> A; r5(N, A) -> r5(N - 1, [N | A]).
r6(0, A) -> A; r6(N, A) -> r6(N - 1, [N | A]).

%% Two processes whose epochs differ a thousandfold in length (see main's comment).
pair(Ms) ->
    Self = self(),
    Until = erlang:monotonic_time(millisecond) + Ms,
    Short = spawn(fun() -> register(short_epochs, self()), Self ! {self(), short_rounds(Until, 0)} end),
    Long = spawn_opt(fun() -> register(long_epochs, self()), Self ! {self(), long_rounds(Until, 0)} end,
                     [{min_heap_size, 150000}]),
    SW = receive {Short, S} -> S * 600 end,  % rounds x 300 cells x 2 words
    LR = receive {Long, L} -> L end,
    io:format("pair_words ~p ~p ~p ~s ~s~n", [SW, LR * 600, LR * 200, pid_to_list(Short), pid_to_list(Long)]).

short_rounds(Until, N) ->
    _ = short_take(300, []),
    case N band 63 =:= 63 andalso erlang:monotonic_time(millisecond) >= Until of
        true -> N + 1;
        false -> short_rounds(Until, N + 1)
    end.

long_rounds(Until, N) ->
    _ = long_take(300, []),
    _ = long_give(100, []),
    _ = idle(?SPIN, 0),
    case N band 63 =:= 63 andalso erlang:monotonic_time(millisecond) >= Until of
        true -> N + 1;
        false -> long_rounds(Until, N + 1)
    end.

short_take(0, Acc) -> Acc;
short_take(N, Acc) -> short_take(N - 1, [N | Acc]).

long_take(0, Acc) -> Acc;
long_take(N, Acc) -> long_take(N - 1, [N | Acc]).

long_give(0, Acc) -> Acc;
long_give(N, Acc) -> long_give(N - 1, [N | Acc]).

%% Short-lived processes beside a long one (see main's comment). Neither is registered: both
%% have erlang:apply/2 as their initial call.
spawners(Ms) ->
    Self = self(),
    Until = erlang:monotonic_time(millisecond) + Ms,
    Steady = spawn(fun() -> Self ! {self(), steady_rounds(Until, 0)} end),
    Spawner = spawn(fun() -> Self ! {self(), spawn_rounds(Until, 0)} end),
    SR = receive {Steady, S} -> S end,
    N = receive {Spawner, P} -> P end,
    io:format("spawners_words ~p ~p ~p~n", [N * 2000, SR * 600, N]).

spawn_rounds(Until, N) ->
    {_, Ref} = spawn_monitor(fun() -> _ = short_lived(1000, []), ok end),
    receive {'DOWN', Ref, _, _, _} -> ok end,
    case N band 63 =:= 63 andalso erlang:monotonic_time(millisecond) >= Until of
        true -> N + 1;
        false -> spawn_rounds(Until, N + 1)
    end.

steady_rounds(Until, N) ->
    _ = steady(300, []),
    _ = idle(?SPIN * 40, 0),
    case N band 63 =:= 63 andalso erlang:monotonic_time(millisecond) >= Until of
        true -> N + 1;
        false -> steady_rounds(Until, N + 1)
    end.

short_lived(0, Acc) -> Acc;
short_lived(N, Acc) -> short_lived(N - 1, [N | Acc]).

steady(0, Acc) -> Acc;
steady(N, Acc) -> steady(N - 1, [N | Acc]).
