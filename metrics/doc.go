// Package metrics exports difctl's activity as Prometheus metrics: it is
// the only package of difctl that imports the Prometheus client. The
// library packages give generic hooks (nbd.Options.OnRequest, OnConn,
// OnFailure and OnConnError; store.OpenOptions.OnCommit and
// store.ObserveCommits; scrub.Options.Progress and OnFinding) and
// blockdev.Volume.Stats; this package turns them into metrics, and
// `difctl serve` and `difctl scrub` serve them with --metrics-listen.
//
//	reg := metrics.New()
//	reg.NBD(&opts, "disk")   // before nbd.NewServer(exports, opts)
//	err := reg.Volume("disk", vol) // the volume's Stats, read at each scrape
//	srv, err := reg.Listen("127.0.0.1:9464") // GET /metrics
//	defer srv.Close()
//
// Every metric of difctl's own is named difctl_*; counters end in _total,
// byte counts in _bytes, durations are histograms in seconds. Labels:
// export (the NBD export's name), volume (the volume's name: the export's
// in serve, the image's file name in scrub), op (the NBD command: read,
// write, flush, trim, write_zeroes, block_status; cache and other when a
// client sends them), result (ok, refused, error), kind (a finding's kind:
// guard, app-tag, ref-tag, storage-tag, sector-crc, torn, io,
// unwritten-data, keyed-tag), sync (true, false), reason (refused, evicted,
// protocol, other).
//
// The NBD server ([Registry.NBD]):
//
//	difctl_nbd_requests_total{export,op,result}            counter
//	difctl_nbd_request_duration_seconds{export,op}         histogram, 10 µs to 5.2 s
//	difctl_nbd_read_bytes_total{export}                    counter
//	difctl_nbd_written_bytes_total{export}                 counter
//	difctl_nbd_connections{export}                         gauge
//	difctl_nbd_connections_total{export}                   counter
//	difctl_nbd_export_full_refusals_total{export}          counter
//	difctl_nbd_connection_errors_total{reason}             counter
//	difctl_verification_failures_total{volume,kind}        counter (also scrubs)
//
// A volume ([Registry.Volume]; blockdev.Stats, read at each scrape):
//
//	difctl_volume_read_blocks_total{volume}                counter
//	difctl_volume_written_blocks_total{volume}             counter
//	difctl_volume_rereads_total{volume}                    counter
//	difctl_volume_transient_blocks_total{volume}           counter
//	difctl_volume_failed_blocks_total{volume}              counter
//	difctl_volume_flushes_total{volume}                    counter
//	difctl_volume_syncs_total{volume}                      counter
//	difctl_volume_tuple_cache_hits_total{volume}           counter
//	difctl_volume_tuple_cache_misses_total{volume}         counter
//	difctl_volume_repairs_total{volume}                    counter
//	difctl_volume_unrepairable_blocks_total{volume}        counter
//
// A volume's store ([Registry.StoreCommits]):
//
//	difctl_store_commits_total{volume,sync}                counter
//	difctl_store_commit_failures_total{volume}             counter
//	difctl_store_synced_commit_duration_seconds{volume}    histogram, 100 µs to 3.3 s
//
// A scrub ([Registry.Scrub]; its last progress report):
//
//	difctl_scrub_checked_bytes_total{volume}               counter
//	difctl_scrub_checked_blocks_total{volume}              counter
//	difctl_scrub_findings_total{volume}                    counter
//	difctl_scrub_pass_done_bytes{volume}                   gauge
//	difctl_scrub_pass_bytes{volume}                        gauge
//	difctl_scrub_rate_bytes_per_second{volume}             gauge
//	difctl_scrub_eta_seconds{volume}                       gauge, -1 while unknown
//	difctl_scrub_paused{volume}                            gauge, 0 or 1
//
// The series of the exports, volumes and failure kinds named to the
// registry exist from the start, at zero, so that rates are known from the
// first scrape. The hooks cost a few atomic additions per request and
// allocate nothing. docs/metrics.md describes every metric and shows a
// scrape.
package metrics
