"""LIBERO, all in one place: the HDF5 reader (`reader`), the frame-replay env (`replay`), the simulator's facts
(`sim`), the eight question types and their labels (`questions`), the label audit (`audit`), the QA report
(`report`) and the renderer that records new episodes (`render`). Importing this package imports nothing heavy."""
