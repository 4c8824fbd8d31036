// The coordinator's /metrics page: ClusterMetrics (coordinator/core/
// cluster_metrics.h) and the database's figures in Prometheus' text format
// (version 0.0.4), built as prometheus-cpp metric families and written by its
// TextSerializer. HttpApi serves it on the coordinator's HTTP listener to a
// metrics token or an admin (docs/operations.md, "Monitoring").
//
// Bounded: a label value is at most MetricsPageOptions::max_label_bytes of
// printable ASCII, and the only per-job series are those of running jobs
// (each holds a slot), so neither a job's name nor the queue's length can
// blow up a scrape. Nothing of a spec, an environment or a token is shown.
//
// Thread-safety: free functions without state.
#ifndef TESSERA_COORDINATOR_API_METRICS_PAGE_H_
#define TESSERA_COORDINATOR_API_METRICS_PAGE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "coordinator/core/cluster_metrics.h"

namespace tessera {

// The database's size and limits, as the server knows them.
struct DatabaseFigures {
  int64_t size_bytes = -1;       // the file and its WAL; -1: unknown (in memory)
  int64_t max_bytes = 0;         // --db-max-bytes; 0: no limit
  int64_t disk_free_bytes = -1;  // free on its file system; -1: unknown
  int64_t reserve_bytes = 0;     // --db-reserve: kept free for job state
  // Database retention (coordinator/store/db_retention.h): how far over its
  // budget (--db-max-size) its last pass left the data, -1 without a budget;
  // and the rows its passes removed since the coordinator started.
  int64_t bytes_over_budget = -1;
  int64_t metric_rows_downsampled = 0;  // by age (--retain-metrics)
  int64_t metric_rows_thinned = 0;      // by size: series cut to their last point
  int64_t metric_rows_pruned = 0;       // by size: all but the kept metrics
  int64_t log_chunks_dropped = 0;       // by age (--retain-logs) and by size
};

struct MetricsPageOptions {
  // Longest label value (a job's name or owner, a worker's name); longer ones
  // are cut and end in "...".
  size_t max_label_bytes = 64;
};

// The content type Prometheus expects for the text format.
inline constexpr char kMetricsContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// The page.
std::string RenderMetricsPage(const ClusterMetrics& metrics, const DatabaseFigures& db,
                              const MetricsPageOptions& options = {});

// `value` as a label value: bytes outside printable ASCII become '_', and a
// value longer than `max_bytes` is cut to `max_bytes` ending in "...".
std::string BoundedLabelValue(std::string_view value, size_t max_bytes);

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_API_METRICS_PAGE_H_
