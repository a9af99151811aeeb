//! The signing CA (upstream `pkg/controller/certificates/authority`): issues a certificate for a
//! parsed request under `PermissiveSigningPolicy`: subject and SANs copied from the request (the
//! subject re-encoded as Go's `pkix.Name.ToRDNSequence` does), key usages from `spec.usages`, no
//! other requested extension, not a CA, NotBefore backdated 5 minutes for TTLs of 8 h and more, and
//! NotAfter never past the CA's own.
//!
//! The DER is written here rather than with rcgen's `CertificateParams`: rcgen keeps one value per
//! subject attribute type, and a client certificate's groups are its repeated `O` values. Strings
//! go through `write_tagged_implicit` + `write_bytes`, never yasna's string writers, which assert
//! on their character sets: nothing a request holds may panic the signer.

use std::net::IpAddr;
use std::time::Duration;

use jiff::Timestamp;
use rcgen::{KeyPair, PublicKeyData, SigningKey};
use ring::rand::SecureRandom;
use x509_parser::extensions::ParsedExtension;
use x509_parser::prelude::FromDer;
use yasna::models::ObjectIdentifier;
use yasna::{DERWriter, Tag};

use super::csr::{Request, Subject};

/// Upstream's backdate and the TTL under which certificates are not backdated.
const BACKDATE: Duration = Duration::from_secs(5 * 60);
const SHORT: Duration = Duration::from_secs(8 * 3600);

/// A CA certificate and its key.
pub struct Authority {
    /// The CA's subject, DER, as the issuer of what it signs.
    issuer: Vec<u8>,
    not_after: Timestamp,
    subject_key_id: Option<Vec<u8>>,
    key: KeyPair,
}

impl Authority {
    /// Loads a CA from PEM text (upstream `--cluster-signing-cert-file` / `-key-file`).
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Authority, String> {
        let (_, block) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes())
            .map_err(|e| format!("reading the CA certificate: {e}"))?;
        let (_, cert) = x509_parser::certificate::X509Certificate::from_der(&block.contents)
            .map_err(|e| format!("parsing the CA certificate: {e}"))?;
        let key = KeyPair::from_pem(key_pem).map_err(|e| format!("reading the CA key: {e}"))?;
        if cert.public_key().subject_public_key.data.as_ref() != key.der_bytes() {
            return Err("the CA key does not match the CA certificate".into());
        }
        let not_after = Timestamp::from_second(cert.validity().not_after.timestamp())
            .map_err(|e| format!("the CA certificate's NotAfter: {e}"))?;
        let subject_key_id = cert
            .extensions()
            .iter()
            .find_map(|e| match e.parsed_extension() {
                ParsedExtension::SubjectKeyIdentifier(id) => Some(id.0.to_vec()),
                _ => None,
            });
        Ok(Authority {
            issuer: cert.tbs_certificate.subject.as_raw().to_vec(),
            not_after,
            subject_key_id,
            key,
        })
    }

    pub fn not_after(&self) -> Timestamp {
        self.not_after
    }

    /// Issues a certificate for `req` valid for `ttl` from `now` (PEM), with `usages` as the
    /// request's `spec.usages` names them.
    pub fn sign(
        &self,
        req: &Request,
        usages: &[String],
        ttl: Duration,
        now: Timestamp,
    ) -> Result<String, String> {
        let (key_usage, ext_key_usages) = key_usages(usages)?;
        let (not_before, not_after) = boundaries(now, ttl, self.not_after);
        let alg = signature_algorithm(&self.key)?;
        let mut serial = [0u8; 16];
        ring::rand::SystemRandom::new()
            .fill(&mut serial)
            .map_err(|_| "no randomness for the serial number".to_string())?;
        let tbs = yasna::construct_der(|w| {
            w.write_sequence(|w| {
                w.next().write_tagged(Tag::context(0), |w| w.write_u8(2));
                w.next().write_bigint_bytes(&serial, true);
                write_algorithm(w.next(), alg);
                w.next().write_der(&self.issuer);
                w.next().write_sequence(|w| {
                    write_time(w.next(), not_before);
                    write_time(w.next(), not_after);
                });
                write_subject(w.next(), &req.subject);
                w.next().write_der(&req.public_key_info);
                w.next().write_tagged(Tag::context(3), |w| {
                    w.write_sequence(|w| self.write_extensions(w, req, key_usage, &ext_key_usages))
                });
            })
        });
        let signature = self
            .key
            .sign(&tbs)
            .map_err(|e| format!("signing the certificate: {e}"))?;
        let der = yasna::construct_der(|w| {
            w.write_sequence(|w| {
                w.next().write_der(&tbs);
                write_algorithm(w.next(), alg);
                w.next().write_bitvec_bytes(&signature, signature.len() * 8);
            })
        });
        Ok(pem_encode("CERTIFICATE", &der))
    }

    /// Go's `buildCertExtensions` order: key usage, extended key usage, basic constraints,
    /// authority key id, subject alternative names.
    fn write_extensions(
        &self,
        w: &mut yasna::DERWriterSeq<'_>,
        req: &Request,
        key_usage: u16,
        ext_key_usages: &[&'static [u64]],
    ) {
        if key_usage != 0 {
            // Bit i of the BIT STRING is Go's KeyUsage bit i; trailing zero bits are dropped.
            let bits = 16 - key_usage.trailing_zeros() as usize;
            let value = key_usage.reverse_bits().to_be_bytes();
            let bytes = &value[..bits.div_ceil(8)];
            let encoded = yasna::construct_der(|w| w.write_bitvec_bytes(bytes, bits));
            write_extension(w.next(), &[2, 5, 29, 15], true, &encoded);
        }
        if !ext_key_usages.is_empty() {
            let encoded = yasna::construct_der(|w| {
                w.write_sequence(|w| {
                    for oid in ext_key_usages {
                        w.next().write_oid(&ObjectIdentifier::from_slice(oid));
                    }
                })
            });
            write_extension(w.next(), &[2, 5, 29, 37], false, &encoded);
        }
        // Basic constraints, cA false: an empty SEQUENCE.
        let encoded = yasna::construct_der(|w| w.write_sequence(|_| {}));
        write_extension(w.next(), &[2, 5, 29, 19], true, &encoded);
        if let Some(id) = &self.subject_key_id {
            let encoded = yasna::construct_der(|w| {
                w.write_sequence(|w| {
                    w.next()
                        .write_tagged_implicit(Tag::context(0), |w| w.write_bytes(id))
                })
            });
            write_extension(w.next(), &[2, 5, 29, 35], false, &encoded);
        }
        let has_sans = !(req.dns_names.is_empty()
            && req.email_addresses.is_empty()
            && req.ip_addresses.is_empty()
            && req.uris.is_empty());
        if has_sans {
            let encoded = yasna::construct_der(|w| {
                w.write_sequence(|w| {
                    for n in &req.dns_names {
                        w.next().write_tagged_implicit(Tag::context(2), |w| {
                            w.write_bytes(n.as_bytes())
                        });
                    }
                    for n in &req.email_addresses {
                        w.next().write_tagged_implicit(Tag::context(1), |w| {
                            w.write_bytes(n.as_bytes())
                        });
                    }
                    for ip in &req.ip_addresses {
                        // Go writes IPv4 (and IPv4-mapped IPv6) addresses in 4 bytes.
                        let bytes = match ip {
                            IpAddr::V4(v4) => v4.octets().to_vec(),
                            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                                Some(v4) => v4.octets().to_vec(),
                                None => v6.octets().to_vec(),
                            },
                        };
                        w.next()
                            .write_tagged_implicit(Tag::context(7), |w| w.write_bytes(&bytes));
                    }
                    for n in &req.uris {
                        w.next().write_tagged_implicit(Tag::context(6), |w| {
                            w.write_bytes(n.as_bytes())
                        });
                    }
                })
            });
            // RFC 5280: the SANs are critical when the subject is empty.
            write_extension(w.next(), &[2, 5, 29, 17], req.subject.is_empty(), &encoded);
        }
    }
}

fn write_extension(w: DERWriter<'_>, oid: &[u64], critical: bool, value: &[u8]) {
    w.write_sequence(|w| {
        w.next().write_oid(&ObjectIdentifier::from_slice(oid));
        if critical {
            w.next().write_bool(true);
        }
        w.next().write_bytes(value);
    });
}

/// Upstream `boundaries`: backdated unless short-lived, NotAfter capped at the CA's.
pub fn boundaries(
    now: Timestamp,
    ttl: Duration,
    ca_not_after: Timestamp,
) -> (Timestamp, Timestamp) {
    let backdate = if ttl < SHORT {
        Duration::ZERO
    } else {
        BACKDATE
    };
    let start = now
        .checked_sub(jiff::SignedDuration::try_from(backdate).unwrap_or_default())
        .unwrap_or(now);
    let mut not_after = jiff::SignedDuration::try_from(ttl)
        .ok()
        .and_then(|d| start.checked_add(d).ok())
        .unwrap_or(ca_not_after);
    if not_after > ca_not_after {
        not_after = ca_not_after;
    }
    let not_before = if start >= ca_not_after {
        ca_not_after
    } else {
        start
    };
    (not_before, not_after)
}

/// Go's `KeyUsage` bits and `ExtKeyUsage` OIDs for `spec.usages` (upstream `keyUsagesFromStrings`;
/// extended usages in Go's enum order, each once).
pub fn key_usages(usages: &[String]) -> Result<(u16, Vec<&'static [u64]>), String> {
    const EXT: &[(&str, &[u64])] = &[
        ("any", &[2, 5, 29, 37, 0]),
        ("server auth", &[1, 3, 6, 1, 5, 5, 7, 3, 1]),
        ("client auth", &[1, 3, 6, 1, 5, 5, 7, 3, 2]),
        ("code signing", &[1, 3, 6, 1, 5, 5, 7, 3, 3]),
        ("email protection", &[1, 3, 6, 1, 5, 5, 7, 3, 4]),
        ("s/mime", &[1, 3, 6, 1, 5, 5, 7, 3, 4]),
        ("ipsec end system", &[1, 3, 6, 1, 5, 5, 7, 3, 5]),
        ("ipsec tunnel", &[1, 3, 6, 1, 5, 5, 7, 3, 6]),
        ("ipsec user", &[1, 3, 6, 1, 5, 5, 7, 3, 7]),
        ("timestamping", &[1, 3, 6, 1, 5, 5, 7, 3, 8]),
        ("ocsp signing", &[1, 3, 6, 1, 5, 5, 7, 3, 9]),
        ("microsoft sgc", &[1, 3, 6, 1, 4, 1, 311, 10, 3, 3]),
        ("netscape sgc", &[2, 16, 840, 1, 113730, 4, 1]),
    ];
    let mut bits = 0u16;
    let mut ext: Vec<&'static [u64]> = Vec::new();
    let mut unrecognized = Vec::new();
    for usage in usages {
        let bit = match usage.as_str() {
            "signing" | "digital signature" => Some(0),
            "content commitment" => Some(1),
            "key encipherment" => Some(2),
            "data encipherment" => Some(3),
            "key agreement" => Some(4),
            "cert sign" => Some(5),
            "crl sign" => Some(6),
            "encipher only" => Some(7),
            "decipher only" => Some(8),
            _ => None,
        };
        if let Some(bit) = bit {
            bits |= 1 << bit;
        } else if let Some((_, oid)) = EXT.iter().find(|(name, _)| name == usage) {
            if !ext.contains(oid) {
                ext.push(oid);
            }
        } else {
            unrecognized.push(format!("{usage:?}"));
        }
    }
    if !unrecognized.is_empty() {
        return Err(format!(
            "unrecognized usage values: [{}]",
            unrecognized.join(" ")
        ));
    }
    ext.sort_by_key(|oid| EXT.iter().position(|(_, o)| o == oid));
    Ok((bits, ext))
}

#[derive(Clone, Copy)]
enum Alg {
    EcdsaSha256,
    EcdsaSha384,
    Ed25519,
    RsaSha256,
}

fn signature_algorithm(key: &KeyPair) -> Result<Alg, String> {
    let alg = key.algorithm();
    if alg == &rcgen::PKCS_ECDSA_P256_SHA256 {
        Ok(Alg::EcdsaSha256)
    } else if alg == &rcgen::PKCS_ECDSA_P384_SHA384 {
        Ok(Alg::EcdsaSha384)
    } else if alg == &rcgen::PKCS_ED25519 {
        Ok(Alg::Ed25519)
    } else if alg == &rcgen::PKCS_RSA_SHA256 {
        Ok(Alg::RsaSha256)
    } else {
        Err(format!("unsupported CA key algorithm {alg:?}"))
    }
}

fn write_algorithm(w: DERWriter<'_>, alg: Alg) {
    w.write_sequence(|w| match alg {
        Alg::EcdsaSha256 => w
            .next()
            .write_oid(&ObjectIdentifier::from_slice(&[1, 2, 840, 10045, 4, 3, 2])),
        Alg::EcdsaSha384 => w
            .next()
            .write_oid(&ObjectIdentifier::from_slice(&[1, 2, 840, 10045, 4, 3, 3])),
        Alg::Ed25519 => w
            .next()
            .write_oid(&ObjectIdentifier::from_slice(&[1, 3, 101, 112])),
        Alg::RsaSha256 => {
            w.next().write_oid(&ObjectIdentifier::from_slice(&[
                1, 2, 840, 113549, 1, 1, 11,
            ]));
            w.next().write_null();
        }
    });
}

/// RFC 5280: UTCTime through 2049, GeneralizedTime after.
fn write_time(w: DERWriter<'_>, t: Timestamp) {
    let dt = t.to_zoned(jiff::tz::TimeZone::UTC);
    let (tag, text) = if (1950..2050).contains(&dt.year()) {
        (
            yasna::tags::TAG_UTCTIME,
            dt.strftime("%y%m%d%H%M%SZ").to_string(),
        )
    } else {
        (
            yasna::tags::TAG_GENERALIZEDTIME,
            dt.strftime("%Y%m%d%H%M%SZ").to_string(),
        )
    };
    w.write_tagged_implicit(tag, |w| w.write_bytes(text.as_bytes()));
}

/// Go's `ToRDNSequence` order; several values of one type share one RDN (a DER SET OF, sorted).
fn write_subject(w: DERWriter<'_>, s: &Subject) {
    let single = |v: &String| {
        if v.is_empty() {
            vec![]
        } else {
            vec![v.clone()]
        }
    };
    let parts: [(&[u64], Vec<String>); 9] = [
        (&[2, 5, 4, 6], s.country.clone()),
        (&[2, 5, 4, 8], s.province.clone()),
        (&[2, 5, 4, 7], s.locality.clone()),
        (&[2, 5, 4, 9], s.street_address.clone()),
        (&[2, 5, 4, 17], s.postal_code.clone()),
        (&[2, 5, 4, 10], s.organization.clone()),
        (&[2, 5, 4, 11], s.organizational_unit.clone()),
        (&[2, 5, 4, 3], single(&s.common_name)),
        (&[2, 5, 4, 5], single(&s.serial_number)),
    ];
    w.write_sequence(|w| {
        for (oid, values) in parts.iter().filter(|(_, v)| !v.is_empty()) {
            w.next().write_set_of(|w| {
                for value in values {
                    w.next().write_sequence(|w| {
                        w.next().write_oid(&ObjectIdentifier::from_slice(oid));
                        if is_printable(value) {
                            w.next()
                                .write_tagged_implicit(yasna::tags::TAG_PRINTABLESTRING, |w| {
                                    w.write_bytes(value.as_bytes())
                                });
                        } else {
                            w.next().write_utf8_string(value);
                        }
                    });
                }
            });
        }
    });
}

/// Go's `isPrintable` with `*` and `&` refused: such strings are written as PrintableString.
fn is_printable(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b" '()+,-./:=?".contains(&b))
}

/// PEM with 64-column lines and `\n` endings (Go's `pem.EncodeToMemory`).
pub fn pem_encode(label: &str, der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::certificates::csr::{parse, tests::csr_pem};
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, SanType};
    use x509_parser::certificate::X509Certificate;

    pub(crate) fn test_ca(not_after_year: i32) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "test-ca");
        params.not_after = rcgen::date_time_ymd(not_after_year, 1, 1);
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn boundaries_backdate_long_certificates_and_stop_at_the_ca() {
        let now = ts("2026-06-01T12:00:00Z");
        let ca = ts("2036-01-01T00:00:00Z");
        let year = Duration::from_secs(8760 * 3600);
        assert_eq!(
            boundaries(now, year, ca),
            (ts("2026-06-01T11:55:00Z"), ts("2027-06-01T11:55:00Z"))
        );
        // Under 8 h: no backdating.
        let hour = Duration::from_secs(3600);
        assert_eq!(boundaries(now, hour, ca), (now, ts("2026-06-01T13:00:00Z")));
        // Never past the CA.
        let ca_soon = ts("2026-07-01T00:00:00Z");
        assert_eq!(boundaries(now, year, ca_soon).1, ca_soon);
        let (nb, na) = boundaries(ts("2040-01-01T00:00:00Z"), year, ca);
        assert_eq!((nb, na), (ca, ca));
    }

    #[test]
    fn usages_map_to_go_bits_and_oids() {
        let u = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (bits, ext) = key_usages(&u(&[
            "client auth",
            "digital signature",
            "server auth",
            "key encipherment",
        ]))
        .unwrap();
        assert_eq!(bits, 0b101);
        assert_eq!(
            ext,
            [
                &[1, 3, 6, 1, 5, 5, 7, 3, 1][..],
                &[1, 3, 6, 1, 5, 5, 7, 3, 2][..]
            ]
        );
        assert_eq!(
            key_usages(&u(&["frob"])).unwrap_err(),
            "unrecognized usage values: [\"frob\"]"
        );
    }

    #[test]
    fn signed_certificate_carries_the_request_and_verifies() {
        let (ca_cert, ca_key) = test_ca(2036);
        let ca = Authority::from_pem(&ca_cert, &ca_key).unwrap();
        let pem = csr_pem(
            "system:node:n1",
            &["system:nodes", "b-group"],
            &[
                SanType::DnsName("n1".try_into().unwrap()),
                SanType::IpAddress("10.1.2.3".parse().unwrap()),
            ],
        );
        let req = parse(pem.as_bytes()).unwrap();
        let usages = vec!["digital signature".to_string(), "server auth".to_string()];
        let now = ts("2026-06-01T12:00:00Z");
        let out = ca
            .sign(&req, &usages, Duration::from_secs(8760 * 3600), now)
            .unwrap();
        let block = x509_parser::pem::parse_x509_pem(out.as_bytes()).unwrap().1;
        let (_, cert) = X509Certificate::from_der(&block.contents).unwrap();
        let ca_block = x509_parser::pem::parse_x509_pem(ca_cert.as_bytes())
            .unwrap()
            .1;
        let (_, ca_parsed) = X509Certificate::from_der(&ca_block.contents).unwrap();
        cert.verify_signature(Some(ca_parsed.public_key())).unwrap();
        assert_eq!(cert.issuer(), ca_parsed.subject());
        let cn: Vec<&str> = cert
            .subject()
            .iter_common_name()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(cn, ["system:node:n1"]);
        let orgs: Vec<&str> = cert
            .subject()
            .iter_organization()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(orgs, ["b-group", "system:nodes"]);
        assert_eq!(
            cert.validity().not_before.timestamp(),
            ts("2026-06-01T11:55:00Z").as_second()
        );
        let ku = cert.key_usage().unwrap().unwrap();
        assert!(ku.critical && ku.value.digital_signature() && !ku.value.key_encipherment());
        let eku = cert.extended_key_usage().unwrap().unwrap();
        assert!(eku.value.server_auth && !eku.value.client_auth);
        let bc = cert.basic_constraints().unwrap().unwrap();
        assert!(!bc.value.ca);
        let san = cert.subject_alternative_name().unwrap().unwrap();
        assert_eq!(san.value.general_names.len(), 2);
        assert_eq!(cert.public_key().raw, req.public_key_info.as_slice());
    }

    #[test]
    fn non_printable_subjects_are_utf8_and_garbage_never_panics() {
        let (ca_cert, ca_key) = test_ca(2036);
        let ca = Authority::from_pem(&ca_cert, &ca_key).unwrap();
        let now = ts("2026-06-01T12:00:00Z");
        let usages = vec!["client auth".to_string()];
        for cn in ["jäne", "a*b", "x&y"] {
            let req = parse(csr_pem(cn, &[], &[]).as_bytes()).unwrap();
            let out = ca
                .sign(&req, &usages, Duration::from_secs(3600), now)
                .unwrap();
            let block = x509_parser::pem::parse_x509_pem(out.as_bytes()).unwrap().1;
            let (_, cert) = X509Certificate::from_der(&block.contents).unwrap();
            let got: Vec<&str> = cert
                .subject()
                .iter_common_name()
                .map(|a| a.as_str().unwrap())
                .collect();
            assert_eq!(got, [cn]);
        }
        // Every single-byte corruption of a request is refused or signed, never a panic.
        let pem = csr_pem("system:node:n1", &["system:nodes"], &[]);
        let der = x509_parser::pem::parse_x509_pem(pem.as_bytes())
            .unwrap()
            .1
            .contents;
        use base64::Engine;
        for i in 0..der.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut bad = der.clone();
                bad[i] ^= flip;
                let b64 = base64::engine::general_purpose::STANDARD.encode(&bad);
                let text = format!(
                    "-----BEGIN CERTIFICATE REQUEST-----\n{b64}\n-----END CERTIFICATE REQUEST-----\n"
                );
                if let Ok(req) = parse(text.as_bytes()) {
                    let _ = ca.sign(&req, &usages, Duration::from_secs(3600), now);
                }
            }
        }
    }

    #[test]
    fn a_mismatched_key_is_refused() {
        let (ca_cert, _) = test_ca(2036);
        let (_, other_key) = test_ca(2036);
        assert!(Authority::from_pem(&ca_cert, &other_key).is_err());
        assert!(Authority::from_pem("junk", "junk").is_err());
    }
}
