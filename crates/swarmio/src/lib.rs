//! SwarmIO: an NVMe SSD emulator that keeps up with GPU-initiated I/O (papers/swarmio.md).
