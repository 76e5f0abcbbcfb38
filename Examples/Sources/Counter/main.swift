import CounterIO

// Registers with the motherboard named by the environment it starts the board with, prints
// `READY example.counter`, serves until SIGTERM, then exits: the whole process, on four threads.
CounterIO.board().runAsProcess()
