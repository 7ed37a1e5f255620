// See CStrataRuntime.h. The method and class descriptors are symbols the Swift compiler
// emits for Strata's `open class ManagedObject` (its method descriptors are what resilient
// clients dispatch through); they are named by their mangled names here, so that a change
// of the method's signature fails the link instead of asking about another method.
// swift_lookUpClassMethod is the Swift runtime's exported entry point that reads a class's
// vtable entry for a method descriptor (the same read a resilient call makes).
#include "CStrataRuntime.h"

extern void *swift_lookUpClassMethod(const void *metadata, const void *method, const void *description);

extern const char strata_validate_value_method
    __asm__("$s6Strata13ManagedObjectC13validateValue_6forKeyyypSg_SStKFTq");
extern const char strata_managed_object_class
    __asm__("$s6Strata13ManagedObjectCMn");

const void *strata_validate_value_implementation(const void *metadata) {
    return swift_lookUpClassMethod(metadata, &strata_validate_value_method, &strata_managed_object_class);
}
