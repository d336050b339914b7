"""The live check's trainer-side modules: TRL's callback, the reference trainer's context manager, the demonstration."""
