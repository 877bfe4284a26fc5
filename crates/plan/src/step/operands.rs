//! The step table machinery: [`define_steps!`] turns the one declaration of each [`Step`]
//! variant (in `variants.rs`) into the enum and its operand/result visitors.
//!
//! Every field of a variant carries a role word in front of its name:
//!
//! | role | meaning | visited by |
//! |---|---|---|
//! | `read` | an array the step reads | `inputs`, `map_inputs` |
//! | `host` | a value read back to the host at run time | `inputs` (after the reads), `host_reads`, `map_inputs` |
//! | `read_host` | both of the above (listed twice by `inputs`, mapped once) | `inputs`, `host_reads`, `map_inputs` |
//! | `mixed` | a spec with both kinds of slots ([`Operand`] says which) | `inputs`, `host_reads`, `map_inputs` |
//! | `write` | a result slot | `outputs`, `map_outputs` |
//! | `attr` | a static attribute, no slot | nothing |
//!
//! The field type says where its slots are ([`Slots`]: a `Slot`, an optional one, a list, a
//! dynamic [`ShapeSource`], a spec with dynamic parts). After the closing brace of each variant
//! comes `shapeless: <expr>`, the compile-mode rule (see [`Step::is_shapeless`]); the expression
//! sees the fields by reference.
//!
//! The generated matches bind every field of every variant with no `..` and no wildcard arm:
//! a variant or field without a role, an unknown role word or a missing `shapeless` rule does
//! not compile.
//!
//! [`Step`]: super::Step
//! [`Step::is_shapeless`]: super::Step::is_shapeless

use super::{
    FloatSource, PadSpec, ReduceAxes, ReshapeTarget, ResizeSpec, ShapeSource, SliceSpec, Slot,
};
use crate::host::HostArg;

/// The slots held by a step field of one role, in a fixed order.
pub trait Slots {
    /// Calls `f` with each slot.
    fn each(&self, f: &mut dyn FnMut(Slot));
    /// Calls `f` with each slot, mutably.
    fn each_mut(&mut self, f: &mut dyn FnMut(&mut Slot));
}

/// A `mixed` field: part of its slots are array reads, part host reads.
pub trait Operand {
    /// Calls `f` with each slot read as an array.
    fn reads(&self, f: &mut dyn FnMut(Slot));
    /// Calls `f` with each slot read back to the host.
    fn host_reads(&self, f: &mut dyn FnMut(Slot));
    /// Calls `f` with every slot once, mutably.
    fn map(&mut self, f: &mut dyn FnMut(&mut Slot));
}

impl Slots for Slot {
    fn each(&self, f: &mut dyn FnMut(Slot)) {
        f(*self)
    }
    fn each_mut(&mut self, f: &mut dyn FnMut(&mut Slot)) {
        f(self)
    }
}

impl<T: Slots> Slots for Option<T> {
    fn each(&self, f: &mut dyn FnMut(Slot)) {
        if let Some(x) = self {
            x.each(f)
        }
    }
    fn each_mut(&mut self, f: &mut dyn FnMut(&mut Slot)) {
        if let Some(x) = self {
            x.each_mut(f)
        }
    }
}

impl<T: Slots> Slots for Vec<T> {
    fn each(&self, f: &mut dyn FnMut(Slot)) {
        self.iter().for_each(|x| x.each(f))
    }
    fn each_mut(&mut self, f: &mut dyn FnMut(&mut Slot)) {
        self.iter_mut().for_each(|x| x.each_mut(f))
    }
}

impl<T: Slots, const N: usize> Slots for [T; N] {
    fn each(&self, f: &mut dyn FnMut(Slot)) {
        self.iter().for_each(|x| x.each(f))
    }
    fn each_mut(&mut self, f: &mut dyn FnMut(&mut Slot)) {
        self.iter_mut().for_each(|x| x.each_mut(f))
    }
}

impl Slots for ShapeSource {
    fn each(&self, f: &mut dyn FnMut(Slot)) {
        self.dynamic_slot().into_iter().for_each(f)
    }
    fn each_mut(&mut self, f: &mut dyn FnMut(&mut Slot)) {
        if let ShapeSource::Dynamic(s) = self {
            f(s)
        }
    }
}

impl Slots for FloatSource {
    fn each(&self, f: &mut dyn FnMut(Slot)) {
        self.dynamic_slot().into_iter().for_each(f)
    }
    fn each_mut(&mut self, f: &mut dyn FnMut(&mut Slot)) {
        if let FloatSource::Dynamic(s) = self {
            f(s)
        }
    }
}

impl Slots for SliceSpec {
    fn each(&self, f: &mut dyn FnMut(Slot)) {
        self.host_reads().into_iter().for_each(f)
    }
    fn each_mut(&mut self, f: &mut dyn FnMut(&mut Slot)) {
        self.starts.each_mut(f);
        self.ends.each_mut(f);
        self.axes.each_mut(f);
        self.steps.each_mut(f);
    }
}

impl Slots for PadSpec {
    fn each(&self, f: &mut dyn FnMut(Slot)) {
        self.host_reads().into_iter().for_each(f)
    }
    fn each_mut(&mut self, f: &mut dyn FnMut(&mut Slot)) {
        if let PadSpec::Onnx { pads, axes } = self {
            pads.each_mut(f);
            axes.each_mut(f);
        }
    }
}

impl Slots for ResizeSpec {
    fn each(&self, f: &mut dyn FnMut(Slot)) {
        self.host_reads().into_iter().for_each(f)
    }
    fn each_mut(&mut self, f: &mut dyn FnMut(&mut Slot)) {
        self.scales.each_mut(f);
        self.sizes.each_mut(f);
    }
}

impl Slots for ReduceAxes {
    fn each(&self, f: &mut dyn FnMut(Slot)) {
        if let ReduceAxes::Dynamic { axes, .. } = self {
            f(*axes)
        }
    }
    fn each_mut(&mut self, f: &mut dyn FnMut(&mut Slot)) {
        if let ReduceAxes::Dynamic { axes, .. } = self {
            f(axes)
        }
    }
}

/// A reshape reads `Like`'s array (its shape only) and the host values of the other targets.
impl Operand for ReshapeTarget {
    fn reads(&self, f: &mut dyn FnMut(Slot)) {
        if let ReshapeTarget::Like(s) = self {
            f(*s)
        }
    }
    fn host_reads(&self, f: &mut dyn FnMut(Slot)) {
        self.host_reads().into_iter().for_each(f)
    }
    fn map(&mut self, f: &mut dyn FnMut(&mut Slot)) {
        match self {
            ReshapeTarget::Onnx { shape, .. } => shape.each_mut(f),
            ReshapeTarget::Squeeze { axes } => axes.each_mut(f),
            ReshapeTarget::Unsqueeze { axes } => axes.each_mut(f),
            ReshapeTarget::Like(s) => f(s),
            ReshapeTarget::Fixed(_) | ReshapeTarget::Flatten { .. } | ReshapeTarget::Dims(_) => {}
        }
    }
}

/// A host evaluation lists every argument slot as read; `Value` arguments are also host reads.
impl Operand for Vec<HostArg> {
    fn reads(&self, f: &mut dyn FnMut(Slot)) {
        self.iter().filter_map(HostArg::slot).for_each(f)
    }
    fn host_reads(&self, f: &mut dyn FnMut(Slot)) {
        for a in self {
            if let HostArg::Value(s) = a {
                f(*s)
            }
        }
    }
    fn map(&mut self, f: &mut dyn FnMut(&mut Slot)) {
        self.iter_mut().filter_map(HostArg::slot_mut).for_each(f)
    }
}

/// Emits the `Step` enum and its visitors from the step table (see the module docs).
macro_rules! define_steps {
    (
        $(#[$em:meta])*
        pub enum Step {
            $(
                $(#[$vm:meta])*
                $V:ident {
                    $( $(#[$fm:meta])* $role:ident $f:ident : $ty:ty ),* $(,)?
                } shapeless: $shapeless:expr
            ),* $(,)?
        }
    ) => {
        $(#[$em])*
        pub enum Step {
            $(
                $(#[$vm])*
                $V { $( $(#[$fm])* $f: $ty ),* },
            )*
        }

        // Bindings a role does not visit stay unused in that visitor.
        #[allow(unused_variables)]
        impl Step {
            /// Applies `f` to every slot this step reads (the ones [`Step::inputs`] lists),
            /// each once, in place.
            pub fn map_inputs(&mut self, f: &mut dyn FnMut(&mut Slot)) {
                match self {
                    $( Step::$V { $($f),* } => {
                        $( $crate::step::operands::define_steps!(@map_in $role $f f); )*
                    } )*
                }
            }

            /// Applies `f` to every slot this step writes, in place.
            pub fn map_outputs(&mut self, f: &mut dyn FnMut(&mut Slot)) {
                match self {
                    $( Step::$V { $($f),* } => {
                        $( $crate::step::operands::define_steps!(@map_out $role $f f); )*
                    } )*
                }
            }

            /// Slots whose arrays this step reads (including host reads and shape-only reads):
            /// the array reads in field order, then [`Step::host_reads`].
            pub fn inputs(&self) -> Vec<Slot> {
                let mut v = Vec::new();
                let push: &mut dyn FnMut(Slot) = &mut |s| v.push(s);
                match self {
                    $( Step::$V { $($f),* } => {
                        $( $crate::step::operands::define_steps!(@reads $role $f push); )*
                        $( $crate::step::operands::define_steps!(@host $role $f push); )*
                    } )*
                }
                v
            }

            /// Slots this step writes.
            pub fn outputs(&self) -> Vec<Slot> {
                let mut v = Vec::new();
                let push: &mut dyn FnMut(Slot) = &mut |s| v.push(s);
                match self {
                    $( Step::$V { $($f),* } => {
                        $( $crate::step::operands::define_steps!(@writes $role $f push); )*
                    } )*
                }
                v
            }

            /// Slots whose values this step reads back to the host at run time (each forces an
            /// evaluation, so a plan with any cannot be compiled as one closure).
            pub fn host_reads(&self) -> Vec<Slot> {
                let mut v = Vec::new();
                let push: &mut dyn FnMut(Slot) = &mut |s| v.push(s);
                match self {
                    $( Step::$V { $($f),* } => {
                        $( $crate::step::operands::define_steps!(@host $role $f push); )*
                    } )*
                }
                v
            }

            /// True when the step's MLX calls depend on input shapes only through MLX itself, so
            /// a shapeless compiled closure stays valid when input shapes change.
            pub fn is_shapeless(&self) -> bool {
                match self {
                    $( Step::$V { $($f),* } => $shapeless, )*
                }
            }
        }
    };

    // One field of one role in one visitor; every role is named in every visitor, so an
    // unknown role word does not compile.
    (@map_in read $x:ident $f:ident) => { $crate::step::operands::Slots::each_mut($x, $f) };
    (@map_in host $x:ident $f:ident) => { $crate::step::operands::Slots::each_mut($x, $f) };
    (@map_in read_host $x:ident $f:ident) => { $crate::step::operands::Slots::each_mut($x, $f) };
    (@map_in mixed $x:ident $f:ident) => { $crate::step::operands::Operand::map($x, $f) };
    (@map_in write $x:ident $f:ident) => {};
    (@map_in attr $x:ident $f:ident) => {};

    (@map_out read $x:ident $f:ident) => {};
    (@map_out host $x:ident $f:ident) => {};
    (@map_out read_host $x:ident $f:ident) => {};
    (@map_out mixed $x:ident $f:ident) => {};
    (@map_out write $x:ident $f:ident) => { $crate::step::operands::Slots::each_mut($x, $f) };
    (@map_out attr $x:ident $f:ident) => {};

    (@reads read $x:ident $f:ident) => { $crate::step::operands::Slots::each($x, $f) };
    (@reads host $x:ident $f:ident) => {};
    (@reads read_host $x:ident $f:ident) => { $crate::step::operands::Slots::each($x, $f) };
    (@reads mixed $x:ident $f:ident) => { $crate::step::operands::Operand::reads($x, $f) };
    (@reads write $x:ident $f:ident) => {};
    (@reads attr $x:ident $f:ident) => {};

    (@host read $x:ident $f:ident) => {};
    (@host host $x:ident $f:ident) => { $crate::step::operands::Slots::each($x, $f) };
    (@host read_host $x:ident $f:ident) => { $crate::step::operands::Slots::each($x, $f) };
    (@host mixed $x:ident $f:ident) => { $crate::step::operands::Operand::host_reads($x, $f) };
    (@host write $x:ident $f:ident) => {};
    (@host attr $x:ident $f:ident) => {};

    (@writes read $x:ident $f:ident) => {};
    (@writes host $x:ident $f:ident) => {};
    (@writes read_host $x:ident $f:ident) => {};
    (@writes mixed $x:ident $f:ident) => {};
    (@writes write $x:ident $f:ident) => { $crate::step::operands::Slots::each($x, $f) };
    (@writes attr $x:ident $f:ident) => {};
}
pub(crate) use define_steps;
