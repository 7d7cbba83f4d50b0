// Ctrl-C while run or chat generates: the first SIGINT asks the generation to stop at its next token (run then prints
// its stats and exits 130; chat ends the reply and goes back to its prompt); a second one, or one while nothing
// generates (chat waiting for a line), ends the process at once with status 130, as llama.cpp's tools do.
#pragma once

namespace df::cli {

class Interrupt {
 public:
  // Installs the SIGINT handler (one Interrupt at a time); the destructor restores the one before.
  Interrupt();
  ~Interrupt();
  Interrupt(const Interrupt&) = delete;
  Interrupt& operator=(const Interrupt&) = delete;

  // While generating, the first SIGINT only asks for a stop; otherwise a SIGINT ends the process.
  void set_generating(bool on);
  bool requested() const;  // a stop was asked for since the last clear()
  void clear();
};

}  // namespace df::cli
