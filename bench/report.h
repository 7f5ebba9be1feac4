// Report directories: `kvpool replay --report DIR` and `kvpool bench --report DIR` write
// their results as DIR/<name>.json, put the plotting script beside them (DIR/plot.py,
// bench/report.py embedded at build time) and run it, which draws PNG and SVG figures
// with matplotlib. The interpreter is $KVPOOL_PYTHON, else /usr/bin/python3 (Debian's,
// which sees python3-matplotlib), else python3 on PATH.
#ifndef KVPOOL_BENCH_REPORT_H_
#define KVPOOL_BENCH_REPORT_H_

#include <string>
#include <vector>

#include "kvpool/status.h"

namespace kvpool::bench {

// The figures drawn (paths), or why not (the script's own words).
Result<std::vector<std::string>> WriteReport(const std::string& dir, const std::string& name,
                                             const std::string& json);

}  // namespace kvpool::bench

#endif  // KVPOOL_BENCH_REPORT_H_
