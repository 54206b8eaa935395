"""Operators' tools over a whole warehouse: rebuild from the lake, a cursor reset, the streams' status."""
