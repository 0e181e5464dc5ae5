//! The crate's Method enum against the library's registry (lctx_method_*,
//! through the C API): the same methods with the same values and names.
//! Fails when a method is added to one and not the other.
use lctx::{Method, Status};

#[test]
fn method_enum_matches_the_registry() {
    let n = Method::count();
    assert!(n >= 12);
    assert_eq!(Method::ALL.len() as i32, n, "the crate lists {:?}, the registry {n} methods", Method::ALL);
    for (i, m) in Method::ALL.iter().enumerate() {
        assert_eq!(m.value(), i as i32, "{m:?}");
        assert_eq!(Method::from_value(i as i32), *m);
        let name = m.name().unwrap_or_else(|| panic!("registry has no method {i}"));
        // The variant's identifier, lower-cased, is the registry name.
        assert_eq!(format!("{m:?}").to_lowercase(), name, "method {i}");
        assert_eq!(Method::from_name(&name).unwrap(), *m);
        assert_eq!(Method::from_name(&name.to_uppercase()).unwrap(), *m);
        assert!(!m.description().unwrap_or_default().is_empty(), "{m:?}");
    }
    assert_eq!(Method::from_value(n), Method::Other(n));
    assert_eq!(Method::Other(n).name(), None);
    assert!(!Method::Other(n).is_implemented());
    assert!(Method::Reform.is_implemented() && Method::Ilre.is_implemented() && !Method::ReAttention.is_implemented());
    let e = Method::from_name("reformer").unwrap_err();
    assert_eq!(e.status, Status::InvalidArg);
    assert!(e.message.contains("reformer"), "{}", e.message);
}
