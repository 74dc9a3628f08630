# A GenServer-heavy Elixir application using only the standard library: a supervisor with a
# registry of named BbShop.Stock servers (GenServer), a BbShop.Ledger Agent and client Tasks
# that place orders through GenServer.call. Started by the integration tests (apps_test.cpp)
# and bench/ as `elixir --sname NAME --cookie COOKIE bb_genserver.exs`; prints `ready`, then runs
# until killed.
defmodule BbShop.Stock do
  use GenServer

  def start_link(id), do: GenServer.start_link(__MODULE__, id, name: via(id))
  def via(id), do: {:via, Registry, {BbShop.Registry, {:stock, id}}}
  def order(id, item, n), do: GenServer.call(via(id), {:order, item, n})
  def restock(id, item, n), do: GenServer.cast(via(id), {:restock, item, n})

  @impl true
  def init(id) do
    items = Map.new(1..200, fn i -> {i, 1_000} end)
    {:ok, %{id: id, items: items, log: [], orders: 0}}
  end

  @impl true
  def handle_call({:order, item, n}, _from, state) do
    left = Map.get(state.items, item, 0)
    {reply, items} =
      if left >= n, do: {:ok, Map.put(state.items, item, left - n)}, else: {:sold_out, state.items}
    # The last 100 orders.
    log = [{item, n, reply} | Enum.take(state.log, 99)]
    {:reply, reply, %{state | items: items, log: log, orders: state.orders + 1}}
  end

  @impl true
  def handle_cast({:restock, item, n}, state) do
    {:noreply, %{state | items: Map.update(state.items, item, n, &(&1 + n))}}
  end
end

defmodule BbShop.Ledger do
  use Agent
  def start_link(_), do: Agent.start_link(fn -> %{} end, name: __MODULE__)
  def record(client, total), do: Agent.update(__MODULE__, &Map.update(&1, client, total, fn t -> t + total end))
end

defmodule BbShop.Client do
  # One customer: orders at pseudo-random stocks (its own generator, so that the profile's hot
  # code is the application's), totals the replies, restocks what sold out.
  def run(client, stocks, seed) do
    {orders, seed} =
      Enum.map_reduce(1..50, seed, fn _, s ->
        s = next(s)
        {{rem(s, stocks) + 1, rem(div(s, stocks), 200) + 1, rem(div(s, 7), 5) + 1}, s}
      end)
    total =
      Enum.reduce(orders, 0, fn {s, item, n}, acc ->
        case BbShop.Stock.order(s, item, n) do
          :ok -> acc + n
          :sold_out -> BbShop.Stock.restock(s, item, 1_000) && acc
        end
      end)
    BbShop.Ledger.record(client, total)
    # A bounded load: a pause between batches leaves the (shared) machine some CPU.
    Process.sleep(1)
    run(client, stocks, seed)
  end

  defp next(s), do: rem(s * 1_103_515_245 + 12_345, 2_147_483_648)
end

defmodule BbShop do
  @stocks 16
  @clients 6
  def main do
    children =
      [{Registry, keys: :unique, name: BbShop.Registry}, BbShop.Ledger] ++
        for id <- 1..@stocks, do: Supervisor.child_spec({BbShop.Stock, id}, id: {:stock, id})
    {:ok, _} = Supervisor.start_link(children, strategy: :one_for_one, name: BbShop.Supervisor)
    {:ok, tasks} = Task.Supervisor.start_link(name: BbShop.Clients)
    for c <- 1..@clients, do: Task.Supervisor.start_child(tasks, fn -> BbShop.Client.run(c, @stocks, c) end)
    IO.puts("ready #{:os.getpid()}")
    Process.sleep(:infinity)
  end
end

BbShop.main()
