-- wrk script (`wrk -s benches/percentiles.lua`): at the end of the run, one line with more latency
-- percentiles than `--latency` prints, in ms, and the request count:
--   PCT p50=8.5 p75=11.2 p90=14.2 p95=16.2 p97=19.4 p98=36.0 p99=101.0 p99.5=147.3 p99.9=209.2 max=248.4 n=158249
-- Read by benches/lib.js (parseWrk: p98Ms, p999Ms, maxMs) for `benches/run.js --percentiles`.
done = function(summary, latency, requests)
  local out = {}
  for _, p in ipairs({50, 75, 90, 95, 97, 98, 99, 99.5, 99.9}) do
    out[#out + 1] = string.format("p%g=%.1f", p, latency:percentile(p) / 1000)
  end
  io.write("PCT " .. table.concat(out, " ") .. string.format(" max=%.1f n=%d\n", latency.max / 1000, summary.requests))
end
