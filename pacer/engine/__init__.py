"""Engine sessions: pacer paces a proving engine it does not own, over the engine protocol
(docs/engine-protocol.md)."""
