//! terrain-sandbox: the local emulator of every API the providers call (filled in by the sandbox issues).
