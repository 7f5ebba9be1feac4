// The live page a node serves at / : self-contained HTML (no external scripts or fonts)
// that polls /api/stats once a second and draws hit ratio per tier, throughput, latency
// percentiles, occupancy, tenants and pod members. The source is status_page.html; the
// build embeds it (status_page.cc.in).
#ifndef KVPOOL_SERVER_STATUS_PAGE_H_
#define KVPOOL_SERVER_STATUS_PAGE_H_

#include <string>

namespace kvpool::server {

const std::string& StatusPage();

}  // namespace kvpool::server

#endif  // KVPOOL_SERVER_STATUS_PAGE_H_
