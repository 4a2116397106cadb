// Runs face-api itself (@vladmandic/face-api 1.7.15 on TF.js 4.22's wasm
// backend) on the raw RGB images written by jpeg2rgb, and on greyscale
// copies of them, with both of face-api's detectors, and writes every
// detection's score and box as JSON: the reference Veil's port is tested
// against (face/nets/testdata/faceapi_grey.json).
//
//   node detect.js MANIFEST MODEL_DIR OUT.json
//
// Greyscale: ITU-R BT.601 luma, Y = (299 R + 587 G + 114 B + 500) / 1000 in
// integers (0.299 R + 0.587 G + 0.114 B rounded half up), replicated into
// R, G and B: the same bytes as Veil's imaging.RGB.Grey (each image's grey
// sha256 is recorded so the Go test can check it).
//
// Detector settings are Veil's: SSD-MobileNet-v1 at 512 px with NMS IoU 0.5,
// the tiny detector at 416 px with NMS IoU 0.4, both with a score threshold
// of THRESHOLD (0.02, well below any threshold Veil uses, so low scores on
// greyscale photos are visible) and at most KEEP (3) detections per image
// and detector, best first.
'use strict';

const fs = require('fs');
const path = require('path');
const crypto = require('crypto');
const faceapi = require('@vladmandic/face-api/dist/face-api.node-wasm.js');

const THRESHOLD = 0.02;
const KEEP = 3;

const { tf } = faceapi;

function sha256(buf) {
  return crypto.createHash('sha256').update(buf).digest('hex');
}

// grey is BT.601 luma in integer arithmetic, replicated into RGB.
function grey(rgb) {
  const out = new Uint8Array(rgb.length);
  for (let i = 0; i + 2 < rgb.length; i += 3) {
    const y = Math.floor((299 * rgb[i] + 587 * rgb[i + 1] + 114 * rgb[i + 2] + 500) / 1000);
    out[i] = y; out[i + 1] = y; out[i + 2] = y;
  }
  return out;
}

// round keeps 6 decimals: scores are compared to 1e-3, boxes to a pixel.
function round(x) {
  return Math.round(x * 1e6) / 1e6;
}

async function detections(pix, w, h, options) {
  const t = tf.tensor3d(Int32Array.from(pix), [h, w, 3], 'int32');
  try {
    const dets = await faceapi.detectAllFaces(t, options);
    return dets
      .sort((a, b) => b.score - a.score)
      .slice(0, KEEP)
      .map((d) => ({
        score: round(d.score),
        box: [round(d.box.x), round(d.box.y), round(d.box.width), round(d.box.height)],
      }));
  } finally {
    tf.dispose(t);
  }
}

async function main() {
  const [manifestPath, modelDir, outPath] = process.argv.slice(2);
  if (!outPath) {
    console.error('usage: node detect.js MANIFEST MODEL_DIR OUT.json'); // eslint-disable-line no-console
    process.exit(2);
  }
  const wasmDir = path.join(path.dirname(require.resolve('@tensorflow/tfjs-backend-wasm/package.json')), 'dist') + path.sep;
  faceapi.tf.setWasmPaths(wasmDir); // read from disk, not fetched
  await tf.setBackend('wasm');
  await tf.ready();
  await faceapi.nets.ssdMobilenetv1.loadFromDisk(modelDir);
  await faceapi.nets.tinyFaceDetector.loadFromDisk(modelDir);
  const ssd = new faceapi.SsdMobilenetv1Options({ minConfidence: THRESHOLD, maxResults: 100 });
  const tiny = new faceapi.TinyFaceDetectorOptions({ inputSize: 416, scoreThreshold: THRESHOLD });
  const manifest = JSON.parse(fs.readFileSync(manifestPath, 'utf8'));
  const images = [];
  for (const m of manifest) {
    const rgb = new Uint8Array(fs.readFileSync(path.join(path.dirname(manifestPath), m.rgb)));
    if (rgb.length !== 3 * m.width * m.height || sha256(rgb) !== m.rgb_sha256) {
      throw new Error(`${m.rgb}: size or sha256 differs from the manifest`);
    }
    const g = grey(rgb);
    const entry = { name: m.name, width: m.width, height: m.height };
    for (const [copy, pix] of [['colour', rgb], ['grey', g]]) {
      entry[copy] = {
        rgb_sha256: sha256(pix),
        ssd: await detections(pix, m.width, m.height, ssd), // eslint-disable-line no-await-in-loop
        tiny: await detections(pix, m.width, m.height, tiny), // eslint-disable-line no-await-in-loop
      };
    }
    images.push(entry);
    console.error(`${m.name}: ssd ${entry.colour.ssd[0]?.score} -> ${entry.grey.ssd[0]?.score}, tiny ${entry.colour.tiny[0]?.score} -> ${entry.grey.tiny[0]?.score}`); // eslint-disable-line no-console
  }
  const doc = {
    meta: {
      generator: 'scripts/faceapi-ref/detect.js',
      faceapi: faceapi.version,
      tfjs: tf.version_core,
      backend: tf.getBackend(),
      node: process.version,
      grey: 'ITU-R BT.601 luma (299 R + 587 G + 114 B + 500) / 1000, integer, replicated into RGB',
      pixels: 'raw RGB from scripts/faceapi-ref/jpeg2rgb (Veil\'s imaging.DecodeFile)',
      ssd_options: { inputSize: 512, minConfidence: THRESHOLD, maxResults: 100, iouThreshold: 0.5 },
      tiny_options: { inputSize: 416, scoreThreshold: THRESHOLD, iouThreshold: 0.4 },
      keep: `at most ${KEEP} detections per image and detector, best first; box = [x, y, width, height] in pixels of the image`,
    },
    images,
  };
  // One line per image keeps the committed file small and diffable.
  const lines = images.map((im) => `  ${JSON.stringify(im)}`);
  const meta = JSON.stringify(doc.meta, null, 2).replace(/\n/g, '\n  ');
  fs.writeFileSync(outPath, `{\n "meta": ${meta},\n "images": [\n${lines.join(',\n')}\n ]\n}\n`);
}

main().catch((err) => {
  console.error(err); // eslint-disable-line no-console
  process.exit(1);
});
