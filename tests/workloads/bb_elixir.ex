# An Elixir workload for beam-bpf's names test (tests/integration/report_test.cpp): compiled
# with elixirc and run as
#   erl -noshell -pa ELIXIR_EBIN -pa DIR -eval "'Elixir.BbElixir':main()"
# It prints `ready`, then spins until a line (or the end) of standard input.
defmodule BbElixir do
  def main do
    spawn(fn -> loop(0) end)
    IO.puts("ready")
    IO.gets("")
    System.halt(0)
  end

  # inner/1's call is not a tail call, so loop/1 stays on the stack; inner/1 tail-calls spin/2,
  # so the stack is loop/1 -> spin/2.
  def loop(n), do: loop(inner(n) + 1)

  def inner(n), do: spin(n, 100_000)

  defp spin(acc, 0), do: acc
  defp spin(acc, k), do: spin(acc + rem(k, 7), k - 1)
end
