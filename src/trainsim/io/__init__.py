"""Readers and writers: traces, Chrome/Perfetto timelines, and other file formats."""
