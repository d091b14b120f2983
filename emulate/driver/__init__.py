"""An emulated CUDA *driver* (``libcuda.so.1``) on which the real NVIDIA libraries of torch's wheels run unchanged:
the one device emulation of ``stepcast run``.

Only the driver is emulated: torch's own ``libcudart``, cuBLAS and cuBLASLt, cuDNN and Triton (and the runtimes
linked statically into them) run as they are, make their own choices from the device the driver describes, and
launch their real kernels through ``cuLaunchKernel`` / ``cuLaunchKernelEx``, which the driver logs instead of
executing. The driver is found by the runtime through ``LD_LIBRARY_PATH``; the one thing preloaded is NCCL (torch
loads the real ``libnccl`` by its RPATH, and it would crash on device memory without pages) with the runtime-entry
marks (csrc/runtime_marks.c).

The C tree (csrc/, one file per API area; everything not implemented answers NOT_SUPPORTED, ZLUDA's rule)
    init.c        ``cuInit``, versions, ``cuGetProcAddress`` (a generated table of every name and ABI version)
    device.c      devices, attributes, contexts          module.c    libraries, modules, kernels, functions
    memory.c      device / pinned / managed / virtual memory, copies and fills (the small data path's users)
    launch.c      launches and occupancy                 stream.c    streams, events, the predicted event clock
    graph.c       CUDA graphs (stream capture and node by node), replayed at each launch
    export.c      the runtime's private export tables    legacy.c    entry points of older ABIs
    capture.c     the capture API (``stepcast_*``: ops, marks, the log's records, host gaps, dedup's hash)
    datapath.c    real bytes for small copies, fills and collectives; the ranks' shared exchange areas
    hostwork.c    host work counted per thread (aten ops, autograd nodes, Python calls)
    dedup.c       rank deduplication          nvml.c     the NVML stand-in (``libnvidia-ml.so.1``)
    nccl.c        NCCL (preloaded)            runtime_marks.c  where torch's libcudart is entered (preloaded)
    opctx.cpp     the RecordFunction hook (built against torch's headers)

Python pieces
    :mod:`.build`       compiles csrc/ into the cache (with the generated proc-address table and stubs).
    :mod:`.runtime_versions`  what differs between CUDA runtime versions (the private tables' lengths), as data.
    :mod:`.device`      the device description from the catalog (conf/hardware/<id>.yaml).
    :mod:`.launchlog`   reads a log's records.
    :mod:`.tracelog`    one rank's log as trace-v1 events (the one parser of captures).
    :mod:`.gemm_choice` the top cuBLASLt heuristic choice and its launched kernels, batched, with the version.
    :mod:`.torch_gemm`  what torch.matmul launches on the same virtual device.
    :mod:`.child`       runs a Python program on the emulated driver and collects its log.
    :mod:`.real_gpu`    for a lent GPU: capture its attributes and matmul kernels, compare with the emulation.

Environment (what the launcher sets for each rank: :func:`emulate.launcher.rank_environment`)
    ``LD_LIBRARY_PATH``           the folder of :func:`.build.driver_path` first.
    ``LD_PRELOAD``                :func:`.build.nccl_path`.
    ``STEPCAST_DRIVER``           the driver's path, for the capture layer (emulate/capture.py) to load its API.
    ``STEPCAST_DRIVER_ATTRS``     ``<CUdevice_attribute id>=<value>,...`` from :func:`.device.driver_environment`,
                                  which also sets ``STEPCAST_DRIVER_GPCS``, ``STEPCAST_GPU_NAME``,
                                  ``STEPCAST_GPU_MEM_BYTES`` and ``STEPCAST_DEVICE_COUNT``. Without them the
                                  driver reports no device (``cuInit`` answers NO_DEVICE).
    ``STEPCAST_DRIVER_LOG``       log prefix; each process appends to ``<prefix>.<pid>.jsonl`` (per pid, since
                                  Inductor's compile workers load the driver too).
    ``STEPCAST_DRIVER_DEBUG``     also log occupancy answers and print unsupported entry points on stderr.

Log format: one JSON object a line, written unbuffered (one ``write`` per record, so a killed process keeps every
record it wrote). Timed records (one per call the capture times: ``launch``, ``malloc``/``free`` (cuMemAlloc and the
virtual-memory API's cuMemCreate/Release; ``ok`` 0 for a refused one), ``memcpy``, ``memset``, ``event_record``,
``stream_wait_event``, ``event_sync``, ``stream_sync``, ``device_sync``, ``collective``) carry ``t``, ``gap`` (the
thread's CPU time since its previous record, capture-layer time taken off), ``ops``/``nodes``/``py`` (counted host
work), ``thread``, ``op``, ``call`` (the op call) and ``rt`` (1: the call came through torch's libcudart, and the gap
ends where the script entered the runtime, since the simulator adds each runtime call's calibrated cost itself). A
launch: ``{"name": <kernel name as the library registered it, mangled>, "grid", "block", "smem", "cluster",
"stream": <1 legacy default, 2 per-thread default, 3+ created>, "device", "via": <entry point, or cuGraphLaunch>}``;
a graph replay's records also ``graph`` (the launch's number) and ``node``. Notes: ``mark`` (iterations),
``comm`` (a communicator), ``unsupported`` (an entry point answered NOT_SUPPORTED, once per name),
``export_table`` (a private table asked for, with the answer), ``export_entry_refused`` (an entry of one that the
driver refuses was called: ``table``, ``index``), ``runtime`` (a CUDA runtime in the process named its ``version``),
``proc_missing`` (a ``cuGetProcAddress`` name/version without an entry). :mod:`.tracelog` documents the fields it reads.

Verified (tests/emulate/test_driver_*.py, CPU only): torch's libcudart initialises on it (the integrity check
passes), ``torch.cuda.is_available()``, the catalog's name / capability / SM count / memory; randn, elementwise,
reductions, ``.item()`` through pinned memory; bf16 / fp16 / fp32 ``torch.matmul`` on h100-sxm, a100-sxm-80gb and l4
launch exactly the kernels (names, grids, clusters) that cuBLASLt's top heuristic choice launches for the same
problem; cuDNN convolutions (fp32 / bf16, forward and backward, ``cudnn.benchmark``), Linear backward on autograd's
thread, cuDNN SDPA forward / backward, ``torch.compile`` (Triton: ptxas on the host, launches through the driver),
CUDA graph capture and replay (each replay logs the captured kernels again), DDP and FSDP2 on several ranks with
rank dedup, sparse runs, and ``expandable_segments`` (virtual memory API; ``libnvidia-ml.so.1`` stands in for NVML).

Modelled, not measured: cluster occupancy (SM pairs spread evenly over the GPCs; H100: 66 / 32 / 16 / 8 clusters
of 2 / 4 / 8 / 16) and per-kernel registers / static shared memory (32 / 0: the images are not parsed).
``cuEventElapsedTime`` answers the predicted device time of the work between the two events
(emulate/event_timing.py), else a nominal microsecond per piece of device work.
"""
