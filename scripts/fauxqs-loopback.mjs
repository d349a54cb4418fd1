// Starts fauxqs's SQS-compatible server on the loopback interface only
// (its own CLI listens on every interface). Used by scripts/stack.sh.
//   node fauxqs-loopback.mjs PORT
//   FAUXQS_APP  file URL of fauxqs's dist/app.js
//   PORT        port to listen on (else FAUXQS_PORT); on the command line,
//               stack.sh can tell which port a running server was given
import { pathToFileURL } from "node:url";

const { buildApp } = await import(pathToFileURL(process.env.FAUXQS_APP).href);
const app = buildApp({ logger: false });
const port = Number(process.argv[2] ?? process.env.FAUXQS_PORT);
await app.listen({ port, host: "127.0.0.1" });
console.log(`fauxqs listening on 127.0.0.1:${port}`);
for (const sig of ["SIGINT", "SIGTERM"]) {
  process.on(sig, () => app.close().then(() => process.exit(0)));
}
