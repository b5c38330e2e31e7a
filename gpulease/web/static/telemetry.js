// The instance page's telemetry charts (ECharts, shipped with the package): one chart per
// metric, a line per GPU, throttling and XID errors marked; the last hour, day or week;
// fetched again every minute without reloading the page (what the user opened stays open).
(() => {
  "use strict";
  const box = document.getElementById("charts");
  if (!box || !window.echarts) return;  // no chart library (make vendor): the table stays
  box.hidden = false;
  const labels = JSON.parse(box.dataset.labels);
  const marked = new Set(["temp_max_c", "sm_clock_max_mhz"]);
  const charts = {};
  let hours = 1;

  const markPoints = (node, gpu, values, times) => node.events
    .filter((e) => e.gpu === gpu.index)
    .map((e) => ({
      coord: [e.t * 1000, values[times.indexOf(e.t)]],
      symbol: e.kind === "xid" ? "pin" : "triangle",
      symbolSize: e.kind === "xid" ? 28 : 12,
      value: e.kind === "xid" ? String(e.xid) : "",
      name: e.kind === "xid" ? `XID ${e.xid}` : `${labels.throttle} ${e.seconds} s`,
    }));

  async function draw() {
    let data;
    try {
      const answer = await fetch(`${box.dataset.series}?hours=${hours}`,
                                 { credentials: "same-origin" });
      if (!answer.ok) return;
      data = await answer.json();
    } catch (_) {
      return;  // offline for a moment: the next minute tries again
    }
    box.querySelector(".chart-empty").hidden = data.nodes.length > 0;
    for (const el of box.querySelectorAll(".chart")) {
      const metric = el.dataset.metric;
      const chart = charts[metric] || (charts[metric] = echarts.init(el));
      const series = [];
      for (const node of data.nodes) {
        for (const gpu of node.gpus) {
          const values = gpu[metric];
          series.push({
            name: data.nodes.length > 1 ? `${node.node} GPU ${gpu.index}` : `GPU ${gpu.index}`,
            type: "line", showSymbol: gpu.t.length < 3, connectNulls: false,
            data: gpu.t.map((t, i) => [t * 1000, values[i]]),
            markPoint: marked.has(metric)
              ? { data: markPoints(node, gpu, values, gpu.t), label: { fontSize: 9 } }
              : undefined,
          });
        }
      }
      chart.setOption({
        animation: false,
        tooltip: { trigger: "axis", valueFormatter: (v) => (v == null ? "—" : v) },
        legend: { type: "scroll", top: 0 },
        grid: { left: 52, right: 16, top: 36, bottom: 28 },
        xAxis: { type: "time", min: data.since * 1000, max: data.until * 1000 },
        yAxis: { type: "value", scale: true },
        series,
      }, { notMerge: true });
    }
  }

  for (const button of box.querySelectorAll("button[data-hours]")) {
    button.addEventListener("click", () => {
      hours = Number(button.dataset.hours);
      for (const other of box.querySelectorAll("button[data-hours]")) {
        other.setAttribute("aria-pressed", String(other === button));
      }
      draw();
    });
  }
  window.addEventListener("resize", () => Object.values(charts).forEach((c) => c.resize()));
  draw();
  setInterval(() => { if (!document.hidden) draw(); }, 60000);
})();
