//! The federation protocol stays compatible with the last release's: hubs and spokes of
//! neighbouring releases talk to each other (docs/operations.md, "Upgrading"). The
//! protocol as released is kept in `proto/released/VERSION/` (`scripts/release.sh` copies
//! it there); this test compiles it with the same vendored `protoc` as the build and
//! compares its descriptors with today's `proto/`:
//!
//! - a message, enum, service or method of the release is still there;
//! - a field keeps its number, type, cardinality and name, or its number and name are
//!   `reserved` once it is gone; no other field takes its number or its name;
//! - an enum value keeps its number and name (a removed one is reserved);
//! - a method keeps its request and response types and whether each streams.
//!
//! Adding is free: new fields, values, messages and methods. The checker is tested on
//! small descriptors below, each change it must refuse.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use prost::Message;
use prost_types::{
    DescriptorProto, EnumDescriptorProto, FileDescriptorProto, FileDescriptorSet,
    ServiceDescriptorProto,
};

const PROTO: &str = "flux/federation/v1/federation.proto";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The released protocols under `proto/released/`, by version, oldest first.
fn releases() -> Vec<(String, PathBuf)> {
    let dir = workspace().join("proto/released");
    let mut out: Vec<(String, PathBuf)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("entry").path())
        .filter(|p| p.join(PROTO).is_file())
        .map(|p| {
            let version = p.file_name().expect("name").to_string_lossy().into_owned();
            (version, p)
        })
        .collect();
    out.sort_by_key(|(v, _)| {
        v.split('.')
            .map(|n| n.parse::<u64>().unwrap_or(0))
            .collect::<Vec<_>>()
    });
    out
}

/// `PROTO` under `root`, compiled to a descriptor set by the vendored `protoc`.
fn compile(root: &Path) -> FileDescriptorSet {
    let out = std::env::temp_dir().join(format!(
        "flux-proto-compat-{}-{}.bin",
        std::process::id(),
        root.file_name().expect("name").to_string_lossy()
    ));
    let protoc = protoc_bin_vendored::protoc_bin_path().expect("vendored protoc");
    let status = std::process::Command::new(protoc)
        .arg(format!("--proto_path={}", root.display()))
        .arg(format!("--descriptor_set_out={}", out.display()))
        .arg(PROTO)
        .status()
        .expect("run protoc");
    assert!(status.success(), "protoc failed on {}", root.display());
    let bytes = std::fs::read(&out).expect("descriptor set");
    let _ = std::fs::remove_file(&out);
    FileDescriptorSet::decode(bytes.as_slice()).expect("a descriptor set")
}

/// What `new` breaks of `old`, one line each (empty: compatible).
fn breaking_changes(old: &FileDescriptorSet, new: &FileDescriptorSet) -> Vec<String> {
    let mut out = Vec::new();
    let new_files: BTreeMap<&str, &FileDescriptorProto> =
        new.file.iter().map(|f| (f.name(), f)).collect();
    for old_file in &old.file {
        let Some(new_file) = new_files.get(old_file.name()) else {
            out.push(format!("{}: the file is gone", old_file.name()));
            continue;
        };
        let package = old_file.package();
        if new_file.package() != package {
            out.push(format!(
                "{}: package {package:?} became {:?}",
                old_file.name(),
                new_file.package()
            ));
            continue;
        }
        messages(
            package,
            &old_file.message_type,
            &new_file.message_type,
            &mut out,
        );
        enums(package, &old_file.enum_type, &new_file.enum_type, &mut out);
        services(package, &old_file.service, &new_file.service, &mut out);
    }
    out
}

fn messages(scope: &str, old: &[DescriptorProto], new: &[DescriptorProto], out: &mut Vec<String>) {
    let by_name: BTreeMap<&str, &DescriptorProto> = new.iter().map(|m| (m.name(), m)).collect();
    for o in old {
        let path = format!("{scope}.{}", o.name());
        let Some(n) = by_name.get(o.name()) else {
            out.push(format!("message {path} is gone"));
            continue;
        };
        let reserved_number = |number: i32| {
            n.reserved_range
                .iter()
                .any(|r| (r.start()..r.end()).contains(&number))
        };
        let reserved_name = |name: &str| n.reserved_name.iter().any(|r| r == name);
        for of in &o.field {
            let field = format!("{path}.{} ({})", of.name(), of.number());
            match n.field.iter().find(|f| f.number() == of.number()) {
                None if reserved_number(of.number()) && reserved_name(of.name()) => {}
                None => out.push(format!(
                    "field {field} is gone without `reserved {};` and `reserved \"{}\";`",
                    of.number(),
                    of.name()
                )),
                Some(nf) => {
                    if nf.name() != of.name() {
                        out.push(format!("field {field} was renamed {}", nf.name()));
                    }
                    if nf.r#type() != of.r#type() || nf.type_name() != of.type_name() {
                        out.push(format!(
                            "field {field} was retyped: {:?} {} -> {:?} {}",
                            of.r#type(),
                            of.type_name(),
                            nf.r#type(),
                            nf.type_name()
                        ));
                    }
                    if nf.label() != of.label() {
                        out.push(format!(
                            "field {field}: {:?} became {:?}",
                            of.label(),
                            nf.label()
                        ));
                    }
                    if nf.oneof_index.is_some() != of.oneof_index.is_some() {
                        out.push(format!("field {field} moved into or out of a oneof"));
                    }
                }
            }
            if let Some(nf) = n
                .field
                .iter()
                .find(|f| f.name() == of.name() && f.number() != of.number())
            {
                out.push(format!("field {field} was renumbered {}", nf.number()));
            }
        }
        messages(&path, &o.nested_type, &n.nested_type, out);
        enums(&path, &o.enum_type, &n.enum_type, out);
    }
}

fn enums(
    scope: &str,
    old: &[EnumDescriptorProto],
    new: &[EnumDescriptorProto],
    out: &mut Vec<String>,
) {
    let by_name: BTreeMap<&str, &EnumDescriptorProto> = new.iter().map(|e| (e.name(), e)).collect();
    for o in old {
        let path = format!("{scope}.{}", o.name());
        let Some(n) = by_name.get(o.name()) else {
            out.push(format!("enum {path} is gone"));
            continue;
        };
        for ov in &o.value {
            let value = format!("{path}.{} ({})", ov.name(), ov.number());
            match n.value.iter().find(|v| v.number() == ov.number()) {
                Some(nv) if nv.name() == ov.name() => {}
                Some(nv) => out.push(format!("enum value {value} was renamed {}", nv.name())),
                None => {
                    let reserved = n
                        .reserved_range
                        .iter()
                        .any(|r| (r.start()..=r.end()).contains(&ov.number()))
                        && n.reserved_name.iter().any(|r| r == ov.name());
                    if !reserved {
                        out.push(format!("enum value {value} is gone without being reserved"));
                    }
                }
            }
        }
    }
}

fn services(
    scope: &str,
    old: &[ServiceDescriptorProto],
    new: &[ServiceDescriptorProto],
    out: &mut Vec<String>,
) {
    let by_name: BTreeMap<&str, &ServiceDescriptorProto> =
        new.iter().map(|s| (s.name(), s)).collect();
    for o in old {
        let path = format!("{scope}.{}", o.name());
        let Some(n) = by_name.get(o.name()) else {
            out.push(format!("service {path} is gone"));
            continue;
        };
        for om in &o.method {
            let method = format!("{path}.{}", om.name());
            let Some(nm) = n.method.iter().find(|m| m.name() == om.name()) else {
                out.push(format!("method {method} is gone"));
                continue;
            };
            if nm.input_type() != om.input_type() || nm.output_type() != om.output_type() {
                out.push(format!(
                    "method {method}: ({}) -> ({}) became ({}) -> ({})",
                    om.input_type(),
                    om.output_type(),
                    nm.input_type(),
                    nm.output_type()
                ));
            }
            if nm.client_streaming() != om.client_streaming()
                || nm.server_streaming() != om.server_streaming()
            {
                out.push(format!("method {method} changed whether it streams"));
            }
        }
    }
}

#[test]
fn the_protocol_keeps_every_released_field_value_and_method() {
    let releases = releases();
    assert!(
        !releases.is_empty(),
        "no released protocol under proto/released/ (scripts/release.sh keeps one)"
    );
    let today = compile(&workspace().join("proto"));
    for (version, root) in releases {
        let broken = breaking_changes(&compile(&root), &today);
        assert!(
            broken.is_empty(),
            "proto/ breaks the protocol of release {version}:\n{}",
            broken.join("\n")
        );
    }
}

/// The release script keeps the released protocol where this test reads it.
#[test]
fn the_release_script_keeps_the_released_protocol() {
    let script = std::fs::read_to_string(workspace().join("scripts/release.sh")).expect("read");
    assert!(
        script.contains("proto/released/"),
        "scripts/release.sh must copy proto/ to proto/released/VERSION"
    );
}

mod checker {
    use super::*;
    use prost_types::field_descriptor_proto::{Label, Type};
    use prost_types::{
        EnumValueDescriptorProto, FieldDescriptorProto, MethodDescriptorProto,
        descriptor_proto::ReservedRange, enum_descriptor_proto::EnumReservedRange,
    };

    fn field(name: &str, number: i32, ty: Type) -> FieldDescriptorProto {
        FieldDescriptorProto {
            name: Some(name.into()),
            number: Some(number),
            r#type: Some(ty as i32),
            label: Some(Label::Optional as i32),
            ..Default::default()
        }
    }

    fn value(name: &str, number: i32) -> EnumValueDescriptorProto {
        EnumValueDescriptorProto {
            name: Some(name.into()),
            number: Some(number),
            ..Default::default()
        }
    }

    /// A protocol of one message (`a` = 1, `b` = 2), one enum (`X` = 0, `Y` = 1) and one
    /// unary method.
    fn base() -> FileDescriptorSet {
        FileDescriptorSet {
            file: vec![FileDescriptorProto {
                name: Some(PROTO.into()),
                package: Some("p".into()),
                message_type: vec![DescriptorProto {
                    name: Some("M".into()),
                    field: vec![field("a", 1, Type::String), field("b", 2, Type::Uint64)],
                    ..Default::default()
                }],
                enum_type: vec![EnumDescriptorProto {
                    name: Some("E".into()),
                    value: vec![value("X", 0), value("Y", 1)],
                    ..Default::default()
                }],
                service: vec![ServiceDescriptorProto {
                    name: Some("S".into()),
                    method: vec![MethodDescriptorProto {
                        name: Some("Call".into()),
                        input_type: Some(".p.M".into()),
                        output_type: Some(".p.M".into()),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    fn changed(edit: impl FnOnce(&mut FileDescriptorProto)) -> Vec<String> {
        let mut new = base();
        edit(&mut new.file[0]);
        breaking_changes(&base(), &new)
    }

    #[test]
    fn additions_are_compatible() {
        assert!(
            changed(|f| {
                f.message_type[0].field.push(field("c", 3, Type::Bool));
                f.enum_type[0].value.push(value("Z", 2));
                f.message_type.push(DescriptorProto {
                    name: Some("N".into()),
                    ..Default::default()
                });
                let mut call = f.service[0].method[0].clone();
                call.name = Some("Other".into());
                f.service[0].method.push(call);
            })
            .is_empty()
        );
    }

    #[test]
    fn a_renumbered_retyped_renamed_or_repeated_field_is_refused() {
        let renumbered = changed(|f| f.message_type[0].field[1].number = Some(5));
        assert!(
            renumbered
                .iter()
                .any(|l| l.contains("p.M.b (2) was renumbered 5")),
            "{renumbered:?}"
        );
        let retyped = changed(|f| f.message_type[0].field[1].r#type = Some(Type::Int64 as i32));
        assert!(
            retyped.iter().any(|l| l.contains("p.M.b (2) was retyped")),
            "{retyped:?}"
        );
        let renamed = changed(|f| f.message_type[0].field[0].name = Some("z".into()));
        assert!(
            renamed
                .iter()
                .any(|l| l.contains("p.M.a (1) was renamed z")),
            "{renamed:?}"
        );
        let repeated = changed(|f| f.message_type[0].field[0].label = Some(Label::Repeated as i32));
        assert!(
            repeated.iter().any(|l| l.contains("became Repeated")),
            "{repeated:?}"
        );
    }

    #[test]
    fn a_removed_field_must_be_reserved_by_number_and_name() {
        let gone = changed(|f| {
            f.message_type[0].field.remove(1);
        });
        assert!(
            gone.iter().any(|l| l.contains("p.M.b (2) is gone")),
            "{gone:?}"
        );
        let number_only = changed(|f| {
            let m = &mut f.message_type[0];
            m.field.remove(1);
            m.reserved_range.push(ReservedRange {
                start: Some(2),
                end: Some(3),
            });
        });
        assert_eq!(number_only.len(), 1, "{number_only:?}");
        let reserved = changed(|f| {
            let m = &mut f.message_type[0];
            m.field.remove(1);
            m.reserved_range.push(ReservedRange {
                start: Some(2),
                end: Some(3),
            });
            m.reserved_name.push("b".into());
        });
        assert!(reserved.is_empty(), "{reserved:?}");
    }

    #[test]
    fn enum_values_methods_and_messages_stay() {
        let value_gone = changed(|f| {
            f.enum_type[0].value.remove(1);
        });
        assert!(
            value_gone.iter().any(|l| l.contains("p.E.Y (1) is gone")),
            "{value_gone:?}"
        );
        let value_reserved = changed(|f| {
            let e = &mut f.enum_type[0];
            e.value.remove(1);
            e.reserved_range.push(EnumReservedRange {
                start: Some(1),
                end: Some(1),
            });
            e.reserved_name.push("Y".into());
        });
        assert!(value_reserved.is_empty(), "{value_reserved:?}");
        let value_renamed = changed(|f| f.enum_type[0].value[1].name = Some("W".into()));
        assert!(
            value_renamed.iter().any(|l| l.contains("was renamed W")),
            "{value_renamed:?}"
        );
        let streams = changed(|f| f.service[0].method[0].server_streaming = Some(true));
        assert!(
            streams
                .iter()
                .any(|l| l.contains("p.S.Call changed whether it streams")),
            "{streams:?}"
        );
        let retyped = changed(|f| f.service[0].method[0].output_type = Some(".p.N".into()));
        assert!(
            retyped.iter().any(|l| l.contains("method p.S.Call")),
            "{retyped:?}"
        );
        let method_gone = changed(|f| {
            f.service[0].method.clear();
        });
        assert!(
            method_gone
                .iter()
                .any(|l| l.contains("method p.S.Call is gone")),
            "{method_gone:?}"
        );
        let message_gone = changed(|f| {
            f.message_type.clear();
        });
        assert!(
            message_gone
                .iter()
                .any(|l| l.contains("message p.M is gone")),
            "{message_gone:?}"
        );
    }
}
