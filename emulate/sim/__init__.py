"""The discrete-event simulator's parts: :mod:`program` (trace -> columns), :mod:`durations` (how long each device
op takes), :mod:`engine` (host, streams, events, collectives). :mod:`emulate.simulate` puts them together."""
