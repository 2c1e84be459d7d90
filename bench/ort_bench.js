// ort_bench.js — times ONNX Runtime (CPU, onnxruntime-node) on an ONNX model
// with input x (b, T, 768); prints one JSON line per shape with min and
// median ms. Used by compare_torch.py --ort:
//   node ort_bench.js model.onnx THREADS REPEAT 8x1024,1x1024,8x256
const ort = require('onnxruntime-node');

(async () => {
  const [model, threads, repeat, shapes] = process.argv.slice(2);
  const sess = await ort.InferenceSession.create(model, {
    intraOpNumThreads: Number(threads), interOpNumThreads: 1,
    graphOptimizationLevel: 'all', executionMode: 'sequential'});
  for (const sh of shapes.split(',')) {
    const [b, t] = sh.split('x').map(Number);
    const x = new ort.Tensor('float32', new Float32Array(b * t * 768).map(() => Math.random()), [b, t, 768]);
    // same number of calls as compare_torch.py uses for the shape
    const rep = Number(repeat) * Math.max(1, Math.floor(8192 / (b * t) / 2));
    for (let i = 0; i < 2; i++) await sess.run({x});
    const ts = [];
    for (let i = 0; i < rep; i++) {
      const t0 = process.hrtime.bigint();
      await sess.run({x});
      ts.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
    ts.sort((a, c) => a - c);
    console.log(JSON.stringify({b, t, min_ms: ts[0], median_ms: ts[Math.floor(ts.length / 2)]}));
  }
})();
