import CounterIO

// Registers with the motherboard named by the environment it starts the board with, prints
// `READY example.counter`, and serves until SIGTERM.
try await CounterIO.board().run()
