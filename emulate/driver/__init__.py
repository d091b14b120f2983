"""An emulated CUDA *driver* (``libcuda.so.1``) on which the real NVIDIA libraries of torch's wheels run unchanged.

The older shim (emulate/csrc, preloaded) replaces the CUDA runtime and stubs cuBLAS/cuDNN, so the kernels it
records are not the ones a GPU would run. Here only the driver is emulated: torch's own ``libcudart``, cuBLAS and
cuBLASLt (and the runtimes linked statically into them) run as they are, make their own choices from the device
the driver describes, and launch their real kernels through ``cuLaunchKernel`` / ``cuLaunchKernelEx``, which the
driver logs instead of executing. Nothing else is needed: the driver is found through ``LD_LIBRARY_PATH``.

Pieces
    :mod:`.build`       compiles csrc/ (one file per API area) plus two generated files: the versioned
                        ``cuGetProcAddress`` table (from cudaTypedefs.h) and NOT_SUPPORTED stubs for the rest.
    :mod:`.device`      the device description from the catalog (conf/hardware/<id>.yaml).
    :mod:`.launchlog`   reads the launch log.
    :mod:`.tracelog`    the log of a ``python -m emulate run --backend driver`` rank as trace-v1 events.
    :mod:`.gemm_choice` the top cuBLASLt heuristic choice and its launched kernels, batched, with the version.
    :mod:`.torch_gemm`  what torch.matmul launches on the same virtual device.
    :mod:`.child`       runs a Python program on the emulated driver and collects its log.
    :mod:`.real_gpu`    for a lent GPU: capture its attributes and matmul kernels, compare with the emulation.

Environment (what a launcher sets for each process)
    ``LD_LIBRARY_PATH``           the folder of :func:`.build.driver_path` first (no ``LD_PRELOAD``).
    ``STEPCAST_DRIVER_ATTRS``     ``<CUdevice_attribute id>=<value>,...`` from :func:`.device.driver_environment`,
                                  which also sets ``STEPCAST_DRIVER_GPCS`` and the ``STEPCAST_GPU_*`` /
                                  ``STEPCAST_DEVICE_COUNT`` variables of :func:`emulate.launcher.gpu_environment`.
                                  Without them the driver reports no device (``cuInit`` answers NO_DEVICE).
    ``STEPCAST_DRIVER_LOG``       log prefix; each process appends to ``<prefix>.<pid>.jsonl`` (per pid, since
                                  Inductor's compile workers load the driver too).
    ``STEPCAST_DRIVER_DEBUG``     also log occupancy answers and print unsupported entry points on stderr.

Log format: one JSON object a line. ``{"event": "launch", "name": <kernel name as the library registered it,
mangled>, "grid": [x, y, z], "block": [x, y, z], "smem": <dynamic shared memory bytes>, "cluster": [x, y, z],
"stream": <stream id: 1 legacy default, 2 per-thread default, 3+ created>, "device": <ordinal of the current
context>, "via": <entry point, or cuGraphLaunch for a replayed graph node>}``; also
``unsupported`` (an entry point answered NOT_SUPPORTED, once per name), ``export_table`` (a private table asked
for, with the answer) and ``proc_missing`` (a ``cuGetProcAddress`` name/version without an entry).

``python -m emulate run --backend driver`` (one rank): :func:`emulate.launcher.backend_environment` sets the above
and ``STEPCAST_SHIM`` to the driver, which also exports the capture API the shim does (csrc/capture.c:
``stepcast_op_enter/exit/set_op/pause/resume/mark/...``; emulate/capture.py loads it ``RTLD_GLOBAL``, so the
RecordFunction hook resolves against it). The log then also holds one timed record per call the capture times
(``launch``, ``malloc``/``free`` (cuMemAlloc and the virtual-memory API's cuMemCreate/Release; ``ok`` 0 for a refused
one), ``memcpy``, ``memset``, ``event_record``, ``stream_wait_event``, ``event_sync``, ``stream_sync``,
``device_sync``) with ``t``, ``gap`` (the thread's CPU time since its previous record, capture-layer time taken off),
``thread``, ``op``, ``call`` (the op call) and ``rt`` (1: the call came through torch's libcudart, and the gap ends
where the script entered the runtime, not where the runtime entered the driver, since the simulator adds each
runtime call's calibrated cost itself: emulate/csrc/runtime_marks.c, preloaded), and ``mark`` records
(iterations); :mod:`.tracelog` makes trace-v1 events of them. Graph replays' launches carry ``graph`` (the launch's
number) and ``node``.

More than one rank: NCCL is the shim's (emulate/csrc/nccl.c, built with emulate/csrc/nccl_driver.c into
``libstepcast_nccl.so``, :func:`.build.nccl_path`), which the launcher preloads (``LD_PRELOAD``) so torch's
ProcessGroupNCCL never reaches the real libnccl (it crashes on device memory without pages). It writes ``comm``
notes and timed ``collective`` records (``text``: the shim log's own X / N line) into this log. The small data path
is the shim's too (emulate/csrc/datapath.c, built into the driver): device memory is a readable, writable window
never committed except where small copies, fills and small collectives write (each at most
``STEPCAST_REAL_BYTES``), so DDP's bucket indices and ``all_gather_object`` carry their real bytes between ranks.
Not there yet: rank deduplication (``stepcast_dedup`` answers -1).

Verified (tests/emulate/test_driver_*.py, CPU only): torch 2.14.1's libcudart initialises on it (the integrity
check passes), ``torch.cuda.is_available()``, the catalog's name / capability / SM count / memory; randn,
elementwise, reductions, ``.item()`` through pinned memory; bf16 / fp16 / fp32 ``torch.matmul`` on h100-sxm,
a100-sxm-80gb and l4 launch exactly the kernels (names, grids, clusters) that cuBLASLt's top heuristic choice
launches for the same problem; cuDNN convolutions (fp32 / bf16, forward and backward, ``cudnn.benchmark``),
Linear backward on autograd's thread, cuDNN SDPA forward / backward, ``torch.compile`` (Triton: ptxas on the host,
launches through the driver), CUDA graph capture and replay (each replay logs the captured kernels again), DDP on two
ranks, and ``expandable_segments`` (virtual memory API; ``libnvidia-ml.so.1`` from csrc/nvml.c stands in for NVML).

Not modelled: time. ``cuEventElapsedTime`` reads the shim's nominal event clock (one microsecond per launch, copy
or fill issued between the events): positive, as on a GPU (Inductor's coordinate-descent tuner divides by it), and
equal for candidates with equal launch counts, so autotuners see ties and keep their first, heuristic candidate;
the predicted time of the work between the events would be the real answer. Modelled, not measured: cluster occupancy
(SM pairs spread evenly over the GPCs; H100: 66 / 32 / 16 / 8 clusters of 2 / 4 / 8 / 16) and per-kernel registers /
static shared memory (32 / 0: the images are not parsed). Graphs built node by node (not by capture) answer
NOT_SUPPORTED.
"""
