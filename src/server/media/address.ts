// Which IP addresses a media URL may reach: the public internet only. Every range that
// routes to this host, its private networks, or nowhere in particular is named here, so
// that a refusal says which rule it broke. IPv4-mapped IPv6 forms (::ffff:a.b.c.d) match
// the IPv4 ranges (net.BlockList compares them as the IPv4 address they carry).
import { BlockList, isIP } from 'node:net';

const RANGES: ReadonlyArray<readonly [name: string, family: 'ipv4' | 'ipv6', network: string, prefix: number]> = [
  ['unspecified', 'ipv4', '0.0.0.0', 8],
  ['loopback', 'ipv4', '127.0.0.0', 8],
  ['private', 'ipv4', '10.0.0.0', 8],
  ['private', 'ipv4', '172.16.0.0', 12],
  ['private', 'ipv4', '192.168.0.0', 16],
  ['carrier-grade NAT', 'ipv4', '100.64.0.0', 10],
  ['link-local', 'ipv4', '169.254.0.0', 16],
  ['IETF protocol assignments', 'ipv4', '192.0.0.0', 24],
  ['documentation', 'ipv4', '192.0.2.0', 24],
  ['documentation', 'ipv4', '198.51.100.0', 24],
  ['documentation', 'ipv4', '203.0.113.0', 24],
  ['benchmarking', 'ipv4', '198.18.0.0', 15],
  ['multicast', 'ipv4', '224.0.0.0', 4],
  ['reserved', 'ipv4', '240.0.0.0', 4],
  ['unspecified', 'ipv6', '::', 128],
  ['loopback', 'ipv6', '::1', 128],
  ['IPv4-compatible', 'ipv6', '::', 96],
  ['NAT64', 'ipv6', '64:ff9b::', 96],
  ['unique-local', 'ipv6', 'fc00::', 7],
  ['link-local', 'ipv6', 'fe80::', 10],
  ['site-local', 'ipv6', 'fec0::', 10],
  ['multicast', 'ipv6', 'ff00::', 8],
  ['documentation', 'ipv6', '2001:db8::', 32],
];

const BLOCKS = RANGES.map(([name, family, network, prefix]) => {
  const list = new BlockList();
  list.addSubnet(network, prefix, family);
  return { name: `${name} (${network}/${prefix})`, list };
});

/** The non-public range `address` (an IP literal) lies in, or undefined for a public address. */
export function nonPublicRange(address: string): string | undefined {
  const family = isIP(address);
  if (family === 0) return 'not an IP address';
  const type = family === 4 ? 'ipv4' : 'ipv6';
  return BLOCKS.find((block) => block.list.check(address, type))?.name;
}
