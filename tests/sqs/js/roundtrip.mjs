// Sends, receives and deletes through the AWS SDK for JavaScript v3, whose SQS
// client checks the MD5OfMessageBody of every send and receive (by default) and
// fails the call on a mismatch. The SDK leaves MD5OfMessageAttributes alone: it
// is checked here, by AWS's documented algorithm. Prints what it saw as JSON.
import { createHash } from "node:crypto";
import {
  CreateQueueCommand,
  DeleteMessageBatchCommand,
  ReceiveMessageCommand,
  SendMessageBatchCommand,
  SendMessageCommand,
  SQSClient,
} from "@aws-sdk/client-sqs";

const [endpoint, name] = process.argv.slice(2);
const options = {
  endpoint,
  region: "us-east-1",
  credentials: { accessKeyId: "key", secretAccessKey: "secret" },
};
const client = new SQSClient(options);

const attributes = {
  text: { DataType: "String", StringValue: "héllo wörld" },
  count: { DataType: "Number", StringValue: "42" },
  blob: { DataType: "Binary", BinaryValue: new Uint8Array([0, 1, 2, 254, 255]) },
  custom: { DataType: "String.json", StringValue: '{"a": 1}' },
  long: { DataType: "Number.java.lang.Long", StringValue: "9007199254740993" },
  price: { DataType: "Number", StringValue: "1.50" },
  gif: { DataType: "Binary.gif", BinaryValue: new Uint8Array([71, 73, 70, 56, 57, 97]) },
};

// MD5OfMessageAttributes as AWS documents it: per attribute, sorted by name, the
// name, the type and the value, each after its length (4 bytes, big-endian), the
// value after a transport byte (1: text, 2: binary).
function attributesMd5(given) {
  const hash = createHash("md5");
  const field = (bytes) => {
    const length = Buffer.alloc(4);
    length.writeUInt32BE(bytes.length);
    hash.update(length);
    hash.update(bytes);
  };
  for (const name of Object.keys(given).sort()) {
    const { DataType, StringValue, BinaryValue } = given[name];
    field(Buffer.from(name, "utf8"));
    field(Buffer.from(DataType, "utf8"));
    if (BinaryValue !== undefined) {
      hash.update(Buffer.from([2]));
      field(Buffer.from(BinaryValue));
    } else {
      hash.update(Buffer.from([1]));
      field(Buffer.from(StringValue, "utf8"));
    }
  }
  return hash.digest("hex");
}
const { QueueUrl } = await client.send(new CreateQueueCommand({ QueueName: name }));
const one = await client.send(
  new SendMessageCommand({ QueueUrl, MessageBody: "first ✓", MessageAttributes: attributes }),
);
const batch = await client.send(
  new SendMessageBatchCommand({
    QueueUrl,
    Entries: [
      { Id: "a", MessageBody: "second", MessageAttributes: { count: attributes.count } },
      { Id: "b", MessageBody: "third\r\nline" },
    ],
  }),
);
const received = [];
while (received.length < 3) {
  const got = await client.send(
    new ReceiveMessageCommand({
      QueueUrl,
      MaxNumberOfMessages: 10,
      WaitTimeSeconds: 2,
      MessageAttributeNames: ["All"],
      MessageSystemAttributeNames: ["All"],
    }),
  );
  received.push(...(got.Messages ?? []));
}
const deleted = await client.send(
  new DeleteMessageBatchCommand({
    QueueUrl,
    Entries: received.map((m, i) => ({ Id: `d${i}`, ReceiptHandle: m.ReceiptHandle })),
  }),
);
// The same send through a client whose MD5 is wrong must fail: the check runs.
class WrongMd5 {
  update() {}
  async digest() {
    return new Uint8Array(16);
  }
}
const strict = new SQSClient({ ...options, md5: WrongMd5 });
let checked = false;
try {
  await strict.send(new SendMessageCommand({ QueueUrl, MessageBody: "control" }));
} catch (error) {
  checked = String(error).includes("InvalidChecksumError");
}
console.log(
  JSON.stringify({
    checked,
    sent: [one.MessageId, ...batch.Successful.map((s) => s.MessageId)],
    bodies: received.map((m) => m.Body).sort(),
    attributes: Object.fromEntries(
      received.map((m) => [m.Body, Object.keys(m.MessageAttributes ?? {}).sort()]),
    ),
    receiveCounts: received.map((m) => m.Attributes.ApproximateReceiveCount),
    types: Object.fromEntries(
      received.map((m) => [
        m.Body,
        Object.fromEntries(
          Object.entries(m.MessageAttributes ?? {}).map(([k, v]) => [k, v.DataType]),
        ),
      ]),
    ),
    sentDigestRight: one.MD5OfMessageAttributes === attributesMd5(attributes),
    receivedDigestsRight: received
      .filter((m) => m.MessageAttributes)
      .map((m) => m.MD5OfMessageAttributes === attributesMd5(m.MessageAttributes)),
    sameDigest:
      received.find((m) => m.Body === "first ✓").MD5OfMessageAttributes ===
      one.MD5OfMessageAttributes,
    deleted: deleted.Successful.length,
  }),
);
