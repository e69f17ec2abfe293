"""The definitions the characterization follows, as text: the end of the package docstring (under
DEFINITIONS_HEADING) and the `definitions` of characterization.json. A leaf: imports nothing."""

DEFINITIONS_HEADING = "Definitions (also in docs/characterization.md and the brief):"
DEFINITIONS = """
  * An I/O is one request as issued to the device (D / block_rq_issue): issue time, start
    sector, sectors, and its operation: read, write, flush or discard. It is matched to its
    completion by (device, start sector, operation), first issued first completed, for a
    per-request latency. A request the driver requeues (the device did not take it, e.g. its
    queue was full) is taken back and counts once, at its last issue; requeues have their
    own column (the sequence point goes back to before it when nothing was issued since).
  * Sequential: its start sector equals the end sector (start + sectors) of the previous read
    or write of the same device in issue order; otherwise random; the first is random.
    Flushes and discards neither count nor break a sequence.
  * Sizes in KiB (1 KiB = 2 sectors); min / median / max / mean / standard deviation
    (population) over requests. Sizes are whole sectors, so a histogram of sizes in sectors
    is exact: the median (mean of the two middle values for an even count) is exact too.
  * Address space: the device's capacity in sectors in 1,000 equal bins; a request falls in the
    bin of its start sector. The capacity (capacity_source): given (cli), else a raw trace's
    header (header), else sysfs for a raw trace recorded on this machine in this boot (sysfs),
    else the highest end sector of the device in the trace (highest_sector: then locality is
    relative to the part of the device the trace touched; `warning` says so). Requests that end
    beyond a known capacity are counted (requests_beyond_capacity) and make `warning` say the
    locality figures are not reliable. Locality = share of requests in the 100
    busiest bins (the hottest 10 % of the address space). A locality band = a maximal run of
    adjacent bins each holding more than LOCALITY_BAND_SHARE of the requests (0.1 % = the share
    every bin would hold if requests were spread evenly). Reads, writes and both.
  * Flushes and discards are counted in their own columns, left out of sizes, read/random
    percentages and IOPS (which count reads and writes only).
  * Trace length: earliest to latest event of the trace (any action); average IOPS = reads and
    writes issued / trace length.
  * Malformed: lines that are not events, and events that cannot be right: longer than any block
    request (4 GiB) or than the device, ending beyond sector 2^64, of another device than a raw
    trace's header names, or out of time order by more than 10 ms (sanity.py says how the event
    at fault is chosen). They are counted and left out of every statistic.
"""
