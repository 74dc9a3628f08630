# A GenServer-heavy Elixir application using only the standard library: a supervisor with a
# registry of named BbShop.Stock servers (GenServer), a BbShop.Ledger Agent, a BbShop.Prices
# server registered globally ({:global, :price_cache}), a BbShop.Report server that prices the
# shop's stock every 50 ms through Task.async_stream, and client Tasks that place orders through
# GenServer.call. Started by the integration tests (apps_test.cpp)
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

defmodule BbShop.Prices do
  # Registered with :global, as a cluster-wide cache is: its name lives in global's tables, not
  # in the VM's registry of local names.
  use GenServer
  def start_link(_), do: GenServer.start_link(__MODULE__, nil, name: {:global, :price_cache})
  def price(item), do: GenServer.call({:global, :price_cache}, {:price, item})

  @impl true
  def init(nil), do: {:ok, Map.new(1..200, fn i -> {i, 100 + rem(i * 37, 900)} end)}

  @impl true
  def handle_call({:price, item}, _from, prices), do: {:reply, Map.get(prices, item, 0), prices}
end

defmodule BbShop.Report do
  # Every 50 ms, the value of the stock of each of the 16 shops, priced in parallel with
  # Task.async_stream: short-lived tasks whose callers are this (registered) server.
  use GenServer
  def start_link(stocks), do: GenServer.start_link(__MODULE__, stocks, name: __MODULE__)

  @impl true
  def init(stocks) do
    Process.send_after(self(), :tick, 50)
    {:ok, stocks}
  end

  @impl true
  def handle_info(:tick, stocks) do
    _values =
      Task.async_stream(1..stocks, fn s -> value(s) end, max_concurrency: 4)
      |> Enum.reduce(0, fn {:ok, v}, acc -> acc + v end)
    Process.send_after(self(), :tick, 50)
    {:noreply, stocks}
  end

  # Pure CPU in the task: a walk over a made-up inventory, so that the tasks show in a profile.
  defp value(s), do: Enum.reduce(1..20_000, s, fn i, acc -> rem(acc * 31 + i, 1_000_003) end)
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
    BbShop.Ledger.record(client, total * BbShop.Prices.price(rem(seed, 200) + 1))
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
      [{Registry, keys: :unique, name: BbShop.Registry}, BbShop.Ledger, BbShop.Prices, {BbShop.Report, @stocks}] ++
        for id <- 1..@stocks, do: Supervisor.child_spec({BbShop.Stock, id}, id: {:stock, id})
    {:ok, _} = Supervisor.start_link(children, strategy: :one_for_one, name: BbShop.Supervisor)
    {:ok, tasks} = Task.Supervisor.start_link(name: BbShop.Clients)
    for c <- 1..@clients, do: Task.Supervisor.start_child(tasks, fn -> BbShop.Client.run(c, @stocks, c) end)
    IO.puts("ready #{:os.getpid()}")
    Process.sleep(:infinity)
  end
end

BbShop.main()
