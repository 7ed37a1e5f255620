#ifndef CSTRATARUNTIME_H
#define CSTRATARUNTIME_H

/// Strata's one question to the Swift runtime: which implementation of
/// `ManagedObject.validateValue(_:forKey:)` a class's objects run (its own override, or an
/// ancestor's). Strata skips the per-property calls of a save's validation for an entity
/// whose model rules cannot fail, unless the class overrides that method.
///
/// `metadata` is the type metadata of `ManagedObject` or one of its subclasses (a
/// `ManagedObject.Type` as a raw pointer). Returns the address of the method's
/// implementation in that class's vtable: equal addresses, the same implementation.
const void *_Nullable strata_validate_value_implementation(const void *_Nonnull metadata);

#endif
