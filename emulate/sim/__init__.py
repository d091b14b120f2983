"""The discrete-event simulator's parts: :mod:`program` (trace -> columns), :mod:`durations` (how long each device
op takes), :mod:`engine` (host, streams, events, collectives), :mod:`synthetic` (traces built in code, for tests
and the benchmark), :mod:`atomic` (complete-or-absent output files). :mod:`emulate.simulate` puts them together."""
